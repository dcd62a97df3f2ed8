# A canary deployment (policy auto): a change of the job first places one
# allocation of the new version beside the running ones, and waits until a
# person promotes it (update { canary = 1, auto_promote = false }): the
# dashboard then shows "Promote canaries" on the deployment's page.
job "shop" {
  type = "service"
  meta {
    nops_managed = "true"
  }
  update {
    canary            = 1
    auto_promote      = false
    min_healthy_time  = "1s"
    healthy_deadline  = "30s"
    progress_deadline = "1m"
  }
  group "shop" {
    count = 2
    task "shop" {
      driver = "mock_driver"
      config {
        run_for = "24h"
      }
      env {
        VERSION = var.version
      }
      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}

variable "version" {
  type    = string
  default = "1"
}
