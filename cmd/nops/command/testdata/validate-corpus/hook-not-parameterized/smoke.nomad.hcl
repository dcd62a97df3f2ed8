job "smoke" {
  type        = "batch"
  datacenters = ["*"]

  meta {
    nops_role = "hook"
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
