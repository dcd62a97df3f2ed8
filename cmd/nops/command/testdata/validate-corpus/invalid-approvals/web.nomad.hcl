job "web" {
  type        = "service"
  datacenters = ["*"]

  meta {
    nops_managed = "true"
    nops_policy        = "approval"
    nops_approvals     = "two"
    nops_approval_ttl  = "3 days"
  }

  group "app" {
    ephemeral_disk {
      size = 10
    }

    task "app" {
      driver = "mock_driver"

      config {
        run_for = "1h"
      }

      resources {
        cpu    = 10
        memory = 16
      }

      logs {
        max_files     = 1
        max_file_size = 1
      }
    }
  }
}
