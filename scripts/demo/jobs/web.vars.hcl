count = 2
