job "migrate" {
  type        = "batch"
  datacenters = ["*"]

  meta {
    nops_role         = "hook"
    nops_hook_timeout = "5m"
  }

  parameterized {
    meta_required = ["nops_job"]
    meta_optional = ["nops_phase", "nops_commit"]
  }

  group "run" {
    ephemeral_disk {
      size = 10
    }

    task "run" {
      driver = "mock_driver"

      config {
        run_for = "1s"
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
