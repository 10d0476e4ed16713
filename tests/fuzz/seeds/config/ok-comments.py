# only comments

   # indented
