"""How code reaches the ranks, in two floors (lab 00).

The public floor, what the labs use and show:
    launch.py    run(fn, world_size, ...) and ranks(world_size): inputs checked, then the engine
    results.py   RunResults (each rank's return value) and RankFailure / RankTimeout
    context.py   distributed(): backend, device, short timeouts, clean teardown; Ctx
    magic.py     the %%ranks cell magic and %ranks_pull
    worker.py    the program every rank runs (course launcher and cluster torchrun alike)

The engine (``engine/``), what makes it fast and safe; nothing outside runtime/ imports it:
    pool.py      warm ranks serving jobs over a socket     serve.py     a warm rank's job loop
    jobs.py      one job's wait loop and collect           rank.py      a rank's marks and exits
    process.py   the torchrun agent: start, output, kill   agent.py     torchrun after preloads
    zygote.py    the fork server agents come from          zygote_server.py  its own side
    isolation.py the state every run starts from           lifeline.py  ranks die with the launcher
    peer_note.py who a stuck send/recv waited for          paths.py     folders, entry points, cores
    forensics.py which rank caused a failure, and where  status.py    a live line while ranks run

Budget, in logical lines (lab_utils.tools.size; ruff format's line breaks do not count): the public
floor at most 400 (374 now), the engine at most 1,650 (1,614), tested; an engine module holds one
mechanism. Imports go one way: public -> engine -> results / context, no cycle
inside runtime/ (tests/test_runtime_layers.py). A cold run is a pool that serves one job and ends:
one rank program, one wait loop (jobs.py), one collect, pooled or not.
"""
