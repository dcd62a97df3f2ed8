# Later files override scalars and merge blocks by name.
http_port = 9650

repository "platform" {
  branch = "main"
}

repository "extra" {
  url = "https://git.example.com/extra.git"
}

notify "slack" {
  events = ["completed"]
}

consul {
  auto_join = false
}
