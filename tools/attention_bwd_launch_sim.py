#!/usr/bin/env python3
"""attention_bwd_launch_sim.py — a model of the Hopper attention backward's launch and of its ordered dQ
additions (Note [Ordered dQ additions], src/ops/attention/cuda/flash_sm90_scheduler.cuh), to compare launch
orders before spending GPU time on them. Causal attention only.

The model: one block per SM; blocks start in launch order as SMs free up. A block of key tile n visits the
query tiles from r n on (r = block_n / block_m), group x (tiles) steps of one time unit each (times a speed
factor drawn per SM, --sm-noise). Step i's dQ piece is staged when its step ends; with ordered additions
its writer adds it once the key tile before it in the (head, tile)'s order has added it (that one's
landing plus --poll), and it lands --landing later; a block stages a piece only once the one before it
has been read (one staging buffer). Atomic additions never wait. Prints the grid's time over the work's
mean per SM (1.0 is a perfect balance, no waits).

  tools/attention_bwd_launch_sim.py --heads 32 --seqlen 32768 --sections 1
  tools/attention_bwd_launch_sim.py --heads 8 --group 4 --seqlen 32768 --head-major --sm-noise 0.02
  tools/attention_bwd_launch_sim.py --heads 8 --group 4 --head-major --ascending-tile-major
"""
import argparse
import heapq
import random


def launch_order(a):
    """Blocks (grid head, key tile, walks its query tiles last first) in launch order: sections of
    a.sections grid heads, key tiles x-fastest over a section's heads. With ordered additions the last
    a.ascending grid heads launch first key tile first and walk last tile first, the others last key tile
    first, first tile first; atomic: every head first key tile first, first tile first."""
    key_tiles = a.seqlen // a.block_n
    order = []
    for s0 in range(0, a.heads, a.sections):
        heads = range(s0, min(a.heads, s0 + a.sections))
        for y in range(key_tiles):
            for h in heads:
                ascending = a.atomic or h >= a.heads - a.ascending
                order.append((h, y if ascending else key_tiles - 1 - y, ascending and not a.atomic))
    return order


def simulate(a):
    rng = random.Random(a.seed)
    r, q_tiles = a.block_n // a.block_m, a.seqlen // a.block_m
    speed = [1.0 + a.sm_noise * rng.gauss(0.0, 1.0) for _ in range(a.sms)]
    free = [(0.0, sm) for sm in range(a.sms)]
    heapq.heapify(free)
    landed = {}  # (query head, tile) -> when the last addition into it landed
    end = 0.0
    for h, n, last_first in launch_order(a):
        t0, sm = heapq.heappop(free)
        tiles = list(range(r * n, q_tiles))
        if last_first:
            tiles.reverse()
        if a.head_major and not (last_first and a.ascending_tile_major):
            steps = [(j, m) for j in range(a.group) for m in tiles]
        else:
            steps = [(j, m) for m in tiles for j in range(a.group)]
        staged, read, done = t0 + a.prologue, t0, [t0, t0]
        for i, (j, m) in enumerate(steps):
            staged = max(staged + speed[sm], read)
            if a.atomic:
                read, done[i % 2] = staged, staged + a.landing
                continue
            key = (h * a.group + j, m)
            turn = max(staged, done[i % 2], landed.get(key, -1e30) + a.poll)
            read, done[i % 2] = turn, turn + a.landing
            landed[key] = done[i % 2]
        finish = max(staged, *done) + a.epilogue
        end = max(end, finish)
        heapq.heappush(free, (finish, sm))
    work = a.heads * a.group * sum(q_tiles - r * n for n in range(a.seqlen // a.block_n))
    return end / (work / a.sms)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", type=int, default=32, help="grid heads (batch x kv heads)")
    p.add_argument("--group", type=int, default=1, help="query heads a kv head")
    p.add_argument("--seqlen", type=int, default=32768)
    p.add_argument("--block-n", type=int, default=128, help="keys a block")
    p.add_argument("--block-m", type=int, default=64, help="query rows a step (64 at d=128, 128 at d=64)")
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--sections", type=int, default=1, help="grid heads a launch section")
    p.add_argument("--ascending", type=int, default=None, help="ascending heads (default: a quarter)")
    p.add_argument("--atomic", action="store_true", help="atomic additions (no order, no waits)")
    p.add_argument("--head-major", action="store_true", help="a block's steps head by head, not tile by tile")
    p.add_argument("--ascending-tile-major", action="store_true",
                   help="with --head-major: the ascending heads' blocks still take their steps tile by tile")
    p.add_argument("--landing", type=float, default=0.6, help="an addition's issue to landing, in steps")
    p.add_argument("--poll", type=float, default=0.15, help="a landed addition to the next writer's turn")
    p.add_argument("--prologue", type=float, default=1.5, help="a block's start to its first step, in steps")
    p.add_argument("--epilogue", type=float, default=1.0, help="a block's last step to its end (dK, dV)")
    p.add_argument("--sm-noise", type=float, default=0.0, help="standard deviation of the SMs' step times")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.ascending is None:
        a.ascending = (a.heads + 3) // 4
    print(f"{simulate(a):.4f}")


if __name__ == "__main__":
    main()
