policy = "approval"
