# A hook: a parameterized batch job Nops dispatches before billing deploys.
job "backup" {
  type = "batch"
  meta {
    nops_role         = "hook"
    nops_hook_timeout = "2m"
  }
  parameterized {
    meta_optional = ["nops_deployment", "nops_job", "nops_commit", "nops_phase"]
  }
  group "backup" {
    task "backup" {
      driver = "mock_driver"
      config {
        run_for   = "2s"
        exit_code = 0
      }
      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
