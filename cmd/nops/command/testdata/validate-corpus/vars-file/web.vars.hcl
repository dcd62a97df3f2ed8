policy = "whenever"
