"""How code reaches the ranks: the launcher, the program each rank runs, set-up and tear-down.

    launch.py    run(fn, world_size, ...): torchrun, forked ranks, results and failures back
    worker.py    the program every rank runs (course launcher and cluster torchrun alike)
    agent.py     torchrun, after importing heavy modules once for every forked rank
    zygote.py    the fork server agents come from: torch imported once per launcher (or shared)
    zygote_server.py  the fork server's own side: its imports, the fork, becoming the agent
    context.py   distributed(): backend, device, short timeouts, clean teardown; Ctx
    failures.py  RankFailure / RankTimeout: which rank caused a failure, with its traceback
"""
