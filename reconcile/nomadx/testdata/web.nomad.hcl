variable "count" {
  type    = number
  default = 1
}

variable "level" {
  type    = string
  default = "info"
}

job "web" {
  datacenters = ["*"]
  type        = "service"

  meta {
    nops_managed = "true"
    level        = var.level
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
        run_for = "1h"
      }

      env {
        LEVEL = upper(var.level)
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }

  group "api" {
    count = 2

    scaling {
      min = 1
      max = 5
    }

    task "api" {
      driver = "mock_driver"

      config {
        run_for = "1h"
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
