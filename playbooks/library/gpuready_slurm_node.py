#!/usr/bin/python
"""Ansible module: drain a Slurm node before provisioning it, resume it afterwards.

The site play runs it in ``pre_tasks`` and ``post_tasks``, delegated to the
controller with gpuready's own Python (``ansible_playbook_python``), so that it is
the same scontrol wrapper drift uses (validator.slurm) with provisioning's reason
prefix, and no second one. A task of the play rather than a loop in
validator/service/provision_service.py around one ansible-playbook per batch: Ansible's ``serial``
already makes the batches, the drain then lands right before the roles of each
batch and the resume right after its ``gpu_verify``, and a plain
``ansible-playbook`` run drains the same way.
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: gpuready_slurm_node
short_description: Drain a Slurm node for provisioning, or resume it after gpu_verify
description:
  - Runs scontrol through gpuready's validator.slurm, on the controller.
  - Draining uses the reason prefix C(gpuready-provision:); a node drained with any
    other reason is never taken over and never resumed.
  - After draining, waits until the node runs no job (ALLOCATED, MIXED, COMPLETING).
options:
  node:
    description: The Slurm node name.
    type: str
    required: true
  state:
    description: C(drained) before provisioning, C(resumed) after gpu_verify passed.
    type: str
    choices: [drained, resumed]
    required: true
  reason:
    description: Why, after the prefix (drained only).
    type: str
    default: provisioning
  wait_idle_s:
    description: How long the drained node may go on running jobs before this fails.
    type: float
    default: 3600
  poll_s:
    description: How often to look at the node while it still runs jobs.
    type: float
    default: 10
"""

RETURN = r"""
gpuready_slurm:
  description: node, state, action (validator.slurm.Action), owned (our drain), check.
  type: dict
  returned: always
"""


def main() -> None:
    """Drain or resume one node; fail with scontrol's reason on one line."""
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "state": {"type": "str", "required": True, "choices": ["drained", "resumed"]},
            "reason": {"type": "str", "default": "provisioning"},
            "wait_idle_s": {"type": "float", "default": 3600.0},
            "poll_s": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    try:
        from validator.error_tree import GpureadyError
        from validator.service import provision_service as provision
        from validator.slurm import Action
    except ImportError as exc:
        module.fail_json(
            msg=f"cannot import gpuready's validator ({exc}): run the task with the Python "
            "gpuready is installed in (ansible_python_interpreter: "
            "'{{ ansible_playbook_python }}')"
        )
        raise  # fail_json exits; this only tells the type checker
    params: dict[str, Any] = module.params
    node, check = params["node"], module.check_mode
    # Returned on failure too: validator.service.provision_service reads "owned" from the
    # failed event
    # to write the failure into the reason of a node this run drained.
    done: dict[str, Any] = {"node": node, "state": params["state"], "check": check}
    try:
        if params["state"] == "drained":
            action, owned = provision.drain_for_provision(node, params["reason"], check=check)
            done.update(action=action.value, owned=owned)
            if not check:
                provision.wait_until_idle(
                    node, wait_idle_s=params["wait_idle_s"], poll_s=params["poll_s"]
                )
            changed = action in (Action.DRAINED, Action.UPDATED)
        else:
            action = provision.resume_after_provision(node, check=check)
            done.update(action=action.value, owned=False)
            changed = action is Action.RESUMED
    except GpureadyError as exc:
        module.fail_json(msg=str(exc), gpuready_slurm=done)
    module.exit_json(changed=changed, gpuready_slurm=done, msg=f"{node}: {done['action']}")


if __name__ == "__main__":
    main()
