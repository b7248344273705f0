"""What each lab launches: the rank workers, their set-up and measurements.

A technique (``lab_utils.parallel``) holds the idea and its communication; an experiment builds a
model, runs the technique (and its naive and PyTorch counterparts), measures it with
``lab_utils.measure`` and returns small dataclasses the notebook prints and plots.

One lab, one module (``labNN.py``) while its experiments are one concept; a lab whose experiments
are several concepts is a package ``labNN/`` whose index lists its modules and re-exports the
main one's names (``lab04.train_step``), so a notebook imports ``labNN`` either way.

    common.py      helpers every lab's workers share: rank_batches, mean_over_ranks, sgd_step,
                   no_span, clock_now (emulated or wall), emulated_window
    lab00.py       small workers for lab 00, the doctor and the CLI examples; the hello script
    lab01.py       what one training step holds in memory, measured on CPU
    lab02/         precision (formats, loss scaling, autocast), fp8 (EMULATED), memory
                   (checkpointing, large-batch SGD), views (the lab's figures and table rows)
    lab03/         collectives (every collective's before / after, the ring's bytes per phase,
                   timings), twin (the same timings on the emulated cluster: alpha-beta, busbw,
                   flat vs hierarchical), views (the lab's figures and table rows)
    lab04/         ddp (sections 1-4 of data parallelism), details (5-8: buffers, SyncBatchNorm,
                   no_sync, sampler, communication hooks, asynchronous SGD), local_sgd (8b: local
                   SGD and DiLoCo against every-step all-reduce)
    lab05/         sharding (DDP, ZeRO-1/2, FSDP, fully_shard; unit timelines; mixed precision),
                   practice (accumulation, meta-device init, clipping, HSDP), twin (prefetch,
                   ZeRO-3 vs ZeRO-2 on the emulated cluster)
    lab06/         tp (TP layers and TinyGPT vs one process, bytes, activations), drills (DTensor,
                   dropout seeding, a SIMULATED slow link, thin matmuls)
    lab07/         pipeline (our schedules on ranks, emulated clock), sim (observer), torch_pipeline
    lab08/         training (2D / 3D), plans (planner tables, pure), ring (ring attention)
    lab09/         shape (the toy MoE and its data), ep (EP vs dense, EP x DP), balance (router)
    lab10/         scaling (curves and bottlenecks on ranks), local (one core: matmuls, a loader),
                   twin (scaling and the pipeline bubble on the emulated cluster)
    lab11/         training (FSDP2 + DCP, crash, resume), drill (the checkpoint drill), elastic
                   (jobs under plain torchrun, save stalls), faults (NaN, drift, stragglers, hangs)
    lab14.py       what a job should log (per-rank agreement), resuming on another world size
    unshard.py     gather a tensor-parallel model back to full size (labs 06, 08, tests)
"""
