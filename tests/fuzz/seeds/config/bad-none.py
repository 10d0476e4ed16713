x = None
