"""Pipeline parallelism (lab 07).

stage.py            StageWorker: one stage on one rank, its F / B / W and its p2p; neighbours
                    from Topology (pipeline_neighbours)
schedules.py        GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2 as plain functions; from_order
torch_schedules.py  the same pipeline with torch.distributed.pipelining's schedules
"""
