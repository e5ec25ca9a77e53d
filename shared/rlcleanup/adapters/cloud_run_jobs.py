"""The job-launcher port on GCP: one execution of a Cloud Run job (`google_cloud_run_v2_job`, Terraform hub.tf)
started through the Run Admin API (`JobsClient.run_job`, i.e. `POST /v2/{job}:run`) with environment overrides.

Only the start is awaited, never the execution: the long-running operation is left to run; its execution name
(`projects/.../executions/...`) is returned for the record. The caller's service account needs
`roles/run.jobsExecutorWithOverrides` on the job (hub.tf grants it to the grant-applying functions alone).
google-cloud-run is imported on first use, so only a large hand-off pays for it (bench/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlcleanup.errors import PermanentError, TransientError


class CloudRunJobLauncher:
    def __init__(self, job_name: str, client: Any = None) -> None:
        """`job_name`: projects/<project>/locations/<region>/jobs/<name> (Terraform's job `id`)."""
        self.job_name = job_name
        self._client = client

    def _jobs(self) -> Any:
        if self._client is None:
            from google.cloud import run_v2

            self._client = run_v2.JobsClient()
        return self._client

    def start(self, env: Mapping[str, str], *, tasks: int = 1) -> str:
        from google.api_core import exceptions
        from google.cloud import run_v2

        overrides = run_v2.RunJobRequest.Overrides(
            container_overrides=[
                run_v2.RunJobRequest.Overrides.ContainerOverride(
                    env=[run_v2.EnvVar(name=k, value=v) for k, v in sorted(env.items())]
                )
            ],
            task_count=tasks,  # the job's parallelism (Terraform) bounds how many run at once
        )
        request = run_v2.RunJobRequest(name=self.job_name, overrides=overrides)
        try:
            operation = self._jobs().run_job(request=request)
        # By HTTP class (the REST transport raises Forbidden/BadRequest; gRPC's PermissionDenied/InvalidArgument/
        # Unauthenticated are their subclasses): no retry makes a missing job or a missing role work.
        except (exceptions.Forbidden, exceptions.Unauthorized, exceptions.NotFound, exceptions.BadRequest) as exc:
            raise PermanentError("job_start_refused", f"Cloud Run refused to start {self.job_name}: {exc}") from exc
        except exceptions.GoogleAPICallError as exc:
            raise TransientError(f"Cloud Run could not start {self.job_name} now: {exc}") from exc
        execution = getattr(operation, "metadata", None)
        name = getattr(execution, "name", "") or getattr(getattr(operation, "operation", None), "name", "")
        return str(name or self.job_name)
