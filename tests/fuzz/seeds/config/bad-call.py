x = str(1)
