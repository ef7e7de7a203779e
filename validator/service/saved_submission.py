"""``gpuready slurm collect``'s request: a saved Slurm submission, judged as it was asked.

``certify --slurm --no-wait`` saves its judging options with the submission
(validator.service.collect_and_judge.FleetRequest.judging); this reads them back into
the certify request that gathers its results.
"""

from __future__ import annotations

from collections.abc import Sequence

from validator.error_tree import BadInputError
from validator.node.burnin.burn_config import BurnConfig
from validator.service.certify_service import CertifyRequest
from validator.service.collect_and_judge import Reach


def collect_request(
    spool: str,
    token: str,
    *,
    wait: bool,
    poll_s: float,
    slurm_drain: bool,
    report_dir: str | None = None,
    json_form: str = "auto",
    sign_key: str | None = None,
    argv: Sequence[str] = (),
) -> CertifyRequest:
    """The certify request that gathers (and judges) a saved submission as it was asked.

    Raises:
        BadInputError: no such submission, or its saved options are damaged.
    """
    from validator.slurm.job_fanout import SlurmOptions
    from validator.slurm.submission_spool import find

    submission = find(spool, token)
    saved = submission.options
    if saved.get("drift"):
        raise BadInputError(
            f"job {token} was submitted by drift --slurm, which compares as results arrive: "
            "run drift --slurm again rather than collecting it"
        )

    def number(key: str) -> float | None:
        value = saved.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInputError(
                f"{submission.directory}/request.json: {key} is not a number; submit again"
            )
        return float(value)

    burn_s = number("burn_s")
    level = number("dcgm_level")
    interconnect = saved.get("interconnect")
    policy_path = saved.get("policy_path")
    return CertifyRequest(
        policy_path=policy_path if isinstance(policy_path, str) else None,
        burn=BurnConfig(duration_s=burn_s) if burn_s else None,
        deadline_s=number("deadline_s"),
        dcgm_level=int(level) if level is not None else None,
        interconnect=interconnect if isinstance(interconnect, bool) else None,
        report_dir=report_dir,
        json_form=json_form,
        sign_key=sign_key,
        reach=Reach(
            slurm=SlurmOptions(spool=spool, wait=wait, poll_s=poll_s, manage_drains=slurm_drain)
        ),
        slurm_collect=token,
        slurm_drain=slurm_drain,
        argv=argv,
    )
