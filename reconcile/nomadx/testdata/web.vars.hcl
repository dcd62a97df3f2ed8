count = 3
level = "debug"
