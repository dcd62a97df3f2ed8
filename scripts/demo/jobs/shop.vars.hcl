version = "1"
