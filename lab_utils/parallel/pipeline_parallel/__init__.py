"""Pipeline parallelism (lab 07).

    schedules.py        StageWorker and the GPipe / 1F1B schedules, from send/recv
    torch_schedules.py  the same pipeline with torch.distributed.pipelining's schedules
"""
