"""The ranks and what drives them from the single controller: the worker of one rank (`fsdp_workers`: FSDP2
actor, critic, rollout engine, agent loops), the group that splits work over the ranks and joins it
(`sharded_group`), its two ways to reach them (`worker_group`: Ray actors; `local_worker_group`: one worker
in this process) and where Ray places them (`placement`). One floor above the agent loops it runs."""
