# Waits for a person's approval, then runs the "backup" hook before the
# register (policy approval, pre-hook backup).
job "billing" {
  type = "service"
  meta {
    nops_managed   = "true"
    nops_policy    = "approval"
    nops_pre_hooks = "backup"
  }
  update {
    min_healthy_time  = "1s"
    healthy_deadline  = "30s"
    progress_deadline = "1m"
  }
  group "billing" {
    task "billing" {
      driver = "mock_driver"
      config {
        run_for = "24h"
      }
      env {
        DB_PASSWORD = "never-shown-by-nops"
      }
      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
