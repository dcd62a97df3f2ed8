# Deployed automatically on every change (policy auto).
job "web" {
  type = "service"
  meta {
    nops_managed = "true"
  }
  update {
    min_healthy_time  = "1s"
    healthy_deadline  = "30s"
    progress_deadline = "1m"
  }
  group "web" {
    count = var.count
    task "web" {
      driver = "mock_driver"
      config {
        run_for = "24h"
      }
      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}

variable "count" {
  type    = number
  default = 1
}
