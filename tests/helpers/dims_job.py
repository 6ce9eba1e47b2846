"""Small multi-dimensional jobs on gloo, profiled with profile_overlap.profile(OUT).

    torchrun --standalone --nproc-per-node 4 tests/helpers/dims_job.py OUT mesh
    torchrun --standalone --nproc-per-node 2 tests/helpers/dims_job.py OUT gpipe|1f1b [--microbatches M]

mesh: a 2 x 2 DeviceMesh ("dp", "tp"); each step a tensor-parallel all_reduce (plain and
functional) and a data-parallel all_gather and all_reduce, with matmuls between them.
gpipe / 1f1b: a two-stage pipeline of torch.distributed.pipelining (ScheduleGPipe / Schedule1F1B)
over M microbatches.
"""

import argparse

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import profile_overlap


def mesh_steps(prof, steps: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
    x = torch.randn(128, 128)
    for _ in range(steps):
        y = x @ x
        dist.all_reduce(y, group=tp)
        gathered = dist.all_gather_into_tensor(torch.empty(256, 128), y, group=dp, async_op=True)
        z = y @ y
        gathered.wait()
        z = funcol.wait_tensor(funcol.all_reduce(z, "sum", tp))
        dist.all_reduce(z, group=dp)
        prof.step()


def pipeline_steps(prof, steps: int, schedule: str, microbatches: int) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    rank = dist.get_rank()
    torch.manual_seed(0)
    stage_module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    stage = PipelineStage(stage_module, rank, 2, torch.device("cpu"))
    kind = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
    sched = kind(stage, n_microbatches=microbatches, loss_fn=lambda out, target: (out - target).square().mean())
    opt = torch.optim.SGD(stage_module.parameters(), lr=0.01)
    batch = torch.randn(8 * microbatches, 64)
    for _ in range(steps):
        if rank == 0:
            sched.step(batch)
        else:
            sched.step(target=torch.zeros(8 * microbatches, 64))
        opt.step()
        opt.zero_grad()
        prof.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("job", choices=["mesh", "gpipe", "1f1b"])
    parser.add_argument("--microbatches", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    with profile_overlap.profile(args.out, wait=1, warmup=1, active=2) as prof:
        if args.job == "mesh":
            mesh_steps(prof, 4)
        else:
            pipeline_steps(prof, 4, args.job, args.microbatches)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
