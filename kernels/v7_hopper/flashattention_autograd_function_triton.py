"""v7_hopper: v6 with K and V brought in by the Hopper bulk copy engine (TMA) through host tensor
descriptors, and a key loop written so that the softmax of one tile can run while the tensor cores
multiply the next; v6 itself wherever that path does not apply.

Measured on the H200 (RESULTS.md; results/nvidia-h200/bench/v7_hopper.csv), % of SDPA's default backend,
cuDNN, in the same process, with the Gluon path described below raced against the tl path (every round of the Gluon
path: the Gluon log, kernels/_shared/gluon_forward_hopper_log.md). Session 31 (19b46bf; 15 runs, 3 s pauses), with
the candidates of the tl autotuner and of the race timed after 40 ms of calls back to back (fa2lab.timing.SETTLE_MS:
before, short bursts at boost clock timed 64,64,4,3 and 128,128,4,3 alike at causal 4096, 166 us, where held busy
they run at 190 and 172 us; experiment tl-pick) and the race over four rounds in alternating order (RACE_ROUNDS):
  non-causal  N = 512 102.4% (97-107; 98.6-104.9), 1024 101.3% (98-103; 99.5-101.9), 2048 100.0% (99-101; 99.4-100.5),
              4096 108.1% (107-109)
  causal      N = 512 100.9% (97-111; 97.5-101.8), 1024 118.3% (116-122), 2048 112.9% (111-114), 4096 106.8% (103-109)
Ahead at 4 of the 8 shapes, level at the other four, behind at none. At causal 4096 the tl path now runs 128,128 in
every run it wins; the race gave 4 of 15 runs to the Gluon launch (175 us by graph replay against 171). On a machine
whose host was slower (8ae17a5: SDPA 29.6 us of host time per call, v7 36.7), N = 512 measured the host: 69% non-causal
and 86% causal, with the same kernels and graph replay. Session 30 (c89546f; 15 runs, 5 s pauses), with
the two 128-row D = 64 Gluon candidates running one copy of the consumers' code, inlined once (shared_code 2), and
causal D = 64 inputs raced on the Gluon path too: the median, min-max, and RESULTS.md's 95% interval for the median:
  non-causal  N = 512 102.5% (14-107*; 102.2-106.6), 1024 101.7% (99-104; 99.4-103.9), 2048 100.1% (99-101; 99.7-100.7),
              4096 109.3% (108-112)
  causal      N = 512 101.2% (79-107*; 99.5-101.7), 1024 118.0% (115-122), 2048 113.1% (112-115), 4096 104.9% (104-108)
  (* one run each, 100.4 and 41.2 us by do_bench against 12.2-14.1 in the others, graph replay unchanged at 8.2-8.6)
Ahead beyond the noise at 5 of the 8 shapes, level at the other three, behind at none. At causal 4096 the tl path's
autotuner picked 64,64,4,3 in 11 of the 15 runs (104.2%) and 128,128,4,3 in 4 (107.7%; 6% faster by graph replay
too): a pick, not a kernel, left there (the Gluon log). Session 25 (36f55d8; 18 runs in three protocols, 5 s
pauses), with the persistent D = 64 Gluon candidate's consumers taking turns
at their exponentials (exp_turn, after cuDNN's ncu source page; the Gluon log) instead of at the issue of their
products: the median, min-max, and RESULTS.md's 95% interval for the median:
  non-causal  N = 512  99.1% (64-108; 97.6-103.4), 1024  99.4% (97-103; 99.1-99.8), 2048 100.8% (99-102; 100.1-101.0),
              4096 110.1% (108-113)
  causal      N = 512  98.5% (91-103; 96.7-102.3), 1024 119.0% (114-122), 2048 113.1% (112-115), 4096 107.4% (104-109)
Ahead beyond the noise at 5 of the 8 shapes (non-causal 2048 now among them: over sessions 21-24's 35 runs 33 were
below 100%), level at N = 512 with either mask, and 0.6% behind at non-causal 1024 (graph replay: 105%, of which SDPA's
replayed call costs about 1 us more than its kernel). experiment coldstart (36f55d8), the kernels alone: at 1024 v7
0.1 us ahead of cuDNN after a spin and 0.2 in graph replay, 0.4 behind after do_bench's flush; at 2048 2.1 and 1.9 ahead,
0.3 after the flush. The flush costs v7 1.4-2.2 us and cuDNN 0.4-0.9, nearly all of it for cold inputs: with the code
warm and the inputs cold (the protocol flush_code, which session 25 misread as the reverse) +2.4 against +1.4 us at
1024, +1.6 against +0.0 at 2048; and experiment items (session 26) puts it at the kernel's start, not in each round
of work items. Session 26 tried six ways to shorten it for the same default kernels (a key loop that holds one
softmax, inputs asked into L2 ahead of the slots, work items in query-tile order, the next item's S_0 before the
epilogue, the TMA descriptors prefetched, the first V on a barrier of its own; none faster, the Gluon
log) and re-ran tests-v7 on the H200 at bf0251e: 42/42. Session 27 timed the first V's own barrier in a
second form, waited for after S_0's issue and outside the key loop: level with the default (101.6% of cuDNN at 1024
against 101.5% in one experiment gluon, 97.8% against 97.8% in another). Session 28 tried the TMA descriptors with
256 bytes of L2 promotion (Triton encodes 128; fa2lab.tma), 4 slots, and the loader holding its second or third key
tile back until the first arrived: none shortened the cold start without lengthening the warm line (the Gluon log).
Nsight Compute at N = 1024 points elsewhere: v7's warps stall for instructions 0.42 cycles per issued instruction
against cuDNN's 0.13, each of its two consumer partitions running its own inlined copy of the consumer's code. One
shared copy (shared_code, a non-inlined function) hung on the H200 in its first form; fixed, it ran 11-25% slower,
since ptxas serialises a called function's wgmma. Session 29 inlined the function once in the PTX (shared_code 2,
FA2_V7_SHARED_CODE=2): in paired experiment gluon rounds it is 2.4 points of cuDNN ahead of the persistent candidate
at N = 1024 (both masks) and level or up to 0.8 behind at 2048-4096; session 30 made it the two 128-row D = 64
candidates' own (the Gluon log; its numbers first, above). The D = 64 kernels' SASS was byte-identical to 36f55d8's
through session 29 (offline sm_90 compile of every D = 64 candidate, both masks), so session 25's numbers stood until
then. Session 21, the same kernels (three 5-run protocols, 2eb9943, d321cd1 and 7372fb3, the last with a 5 s
pause before each run; the median of 15 runs, min-max):
  non-causal  N = 512   98.3% (47-106)*, 1024  98.8% (96-103), 2048  99.3% (98-100), 4096 110.2% (109-112)
  causal      N = 512   98.6% (69-103)*, 1024 119.2% (116-125), 2048 113.2% (112-115), 4096 107.1% (103-108)
  (* at N = 512 v7's do_bench follows the host: in the process of each of the first two protocols whose host was
  slow (v7 35-40 us a call, SDPA 31; 17-21 in the others) it measured 20.6-26.6 us against 13.0-14.1; its graph
  replay stayed at 8.7 us, cuDNN's at 9.7-10.0. With the pause no process was slow (v7 18-27 us a call) and N = 512
  came to 100% (97-106) and 99% (94-102). Experiment dobench, 12 fresh processes: v7 94.6-107.6% of cuDNN by
  do_bench, median 97.8%.)
Session 22 added two more 5-run protocols of the same kernels, both with a 5 s pause: 332342c, non-causal 99/99/99/109%
(95-100, 96-99, 99-100, 108-110), causal 99/117/114/106% (93-104, 116-124, 112-115, 104-107); 5f5b5ad (the default
kernels' SASS at these shapes is the same at the session's last commit), non-causal 96/100/99/110% (95-104, 98-101,
98-100, 109-114), causal 102/118/113/108% (94-103, 118-122, 112-114, 103-109). Over all 25 runs: non-causal 98.3
(47-106) / 99.0 (96-103) / 99.4 (98-100) / 109.8% (108-114), causal 98.8 (69-104) / 118.8 (116-125) / 113.2 (112-115) /
107.1% (103-109): the same four shapes level. Two more levers on the Gluon path were slower (the Gluon
log): the row sums of P on the tensor cores (row_sum, 13% fewer instructions but 84.2 us against 80.7 under ncu at
2048) and key tiles of 64 (82-88% of cuDNN). experiment items located the rest of the gap at 1024 and 2048: per round of
work items the persistent kernel costs 1.2-1.3 us beside its key tiles and cuDNN's 1.0-1.1, the key tiles themselves the
same. One key loop across the items (stream) brought that to 0.66 us but made every key tile dearer (94.9/94.9% of cuDNN
at 1024/2048): not kept. Rebuilt with the item loop kept and only the boundary changed, and timed in session 23: 93.7/
98.6/100.2% of cuDNN at N = 1024/2048/4096 against the default's 98.0/99.1/100.4% (the Gluon log): not
kept either. Session 23's 5-run protocol (f8938ac, 5 s pause): non-causal 100/101/99/110%, causal 98/121/113/108%; over
all 30 runs of sessions 21-23: non-causal 98.7 (47-106) / 99.0 (96-103) / 99.3 (98-100) / 109.7% (108-114), causal
98.7 (69-106) / 119.2 (116-125) / 113.3 (112-115) / 107.1% (103-109): still the same four shapes level.
Session 24's 5-run protocol (831f436, 5 s pause; the D = 64 candidates unchanged, their item loop now counting its
turns): non-causal 101/98/99/108%, causal 99/120/113/108%; over all 35 runs of sessions 21-24: non-causal 98.8 (47-106)
/ 99.0 (96-103) / 99.3 (98-100) / 109.5% (108-114), causal 98.8 (69-106) / 119.2 (116-125) / 113.2 (112-115) / 107.1%
(102-109). The session's lever for those shapes, the next tile's scores issued before each softmax (lookahead), was
slower at D = 64 (75.7-95.9% of cuDNN) and faster at D = 128 (the Gluon log), where it is now v7's
candidate: 88.7/92.7/96.1% of cuDNN non-causal at N = 1024/2048/4096 (831f436), and causal D = 128 inputs are raced
between it and the tl path (forced, the Gluon path made 96.1/101.3/101.1% where the tl path made 119.2/103.3/90.1%).
Three levers tried on the Gluon path in session 21 were slower or unchanged (poly_exp, early_p, mixed: the Gluon
log); its ncu source pages say why 1024 and 2048 stay level: with 2 consumers the products and the
exponentials take turns (tensor pipe 47.5%, MUFU 49.1% of cycles at 2048, cuDNN alike), with 3 (N = 4096) they
overlap (57.8% and 59.7%; cuDNN 51.2% and 52.8%), and 192-row tiles do not fit 1024 or 2048 rows per head evenly
(mixed, which fills the last round with 128-row items, came to 97.8% of cuDNN at 2048 against ws2's 99.1%).
On shapes neither version was tuned on, at 7921954: 10 of 10 as fast as v6 or faster (1.02-1.27x).
Session 20 made unsynced_arrive the Gluon path's default: the key loop's mbarrier arrives and slot wait
without the bar.sync that Triton 3.6 puts before each (the Gluon log). Eight runs of those kernels
(commit c2d6761 with FA2_V7_UNSYNCED_ARRIVE=1, 5 runs; 451b289, where it is the default, 3 runs: the call's deadline
cut the fourth), the median and the runs' min-max:
  non-causal  N = 512   99.2% (52-105)*, 1024  99.5% (97-101), 2048  99.8% (99-100), 4096 109.6% (108-111)
  causal      N = 512  100.8% (93-105),  1024 118.4% (111-121), 2048 112.8% (112-114), 4096 107.1% (105-108)
  (* one run at 52%: 24.5 us by do_bench against 13.0-13.5 in the others, its graph replay unchanged at 8.8 us)
Without it, session 19's four 5-run protocols (baacd40, 538f1fa: 4 runs, ad1d90a twice; 19 runs) had 99.3/98.5/99.2/
109.4% non-causal and 98.4/118.8/113.2/107.0% causal, and session 20's one more (28cf1ec) 100.0/98.3/99.7/109.3% and
98.2/119.4/112.7/107.7%. The harness's graph-replay column puts v7 ahead at all 8 shapes in every protocol of
these kernels (session 19: medians 111/103/103/109% and 115/139/116/106%; with unsynced_arrive 112/102/103/108% and
115/139/116/107%): SDPA's replayed call costs about 1 us more than its kernel. Issue 6's goal
(at least cuDNN at every harness shape, both masks) is met by do_bench beyond the spread at 4 of the 8 shapes
(non-causal 4096, causal from 1024 up); at N = 512 with either mask and at non-causal 1024 and 2048 v7 and cuDNN are
level: medians within 1% of 100% and runs on both sides. The kernels alone (torch.profiler's GPU durations, experiment
coldstart, commit c2d6761, the switch off and then on in one call; cuDNN's from the same runs in brackets): N = 1024
23.8 -> 23.5 us after a spin (23.0, 23.1), 24.7 -> 24.4 after do_bench's flush (23.9, 24.0), 23.3 -> 23.0 in graph
replay (22.6, 22.6); N = 2048 78.4 -> 77.4 (77.4, 77.9), 78.5 -> 78.2 (77.8, 78.1), 76.6 -> 76.4 (75.9, 76.1): level with
cuDNN's at 2048, still 0.3-0.4 us behind at 1024. Eight other attempts on that gap (sessions 18-20; the Gluon
log) measured no faster: per-thread barrier arrivals, the next work item's first Q K^T issued before the
epilogue, a prefetch of the TMA descriptors, O written by a TMA store, V on barriers of its own, row maxima folded
by halves (slower: 78.1 -> 80.9 us at 2048), and on the persistent grid no ping-pong, or the pin of the exponentials
under the P V product. Causal inputs raced between the two paths (538f1fa) took the tl path at every shape, so they
stayed on it until session 30 (gluon_applies). The test file passes natively (42 of 42 at ad1d90a and 28cf1ec, at
c2d6761 with
FA2_V7_UNSYNCED_ARRIVE=1, the kernels 451b289 runs by default, and at d321cd1, a9f2ff6, 332342c, 5f5b5ad, f8938ac and,
with the D = 128 candidates, d0f82f9). On shapes neither version was tuned on it is as fast as
v6 or faster on 10 of 10 at 451b289 (experiments/other_shapes.csv: 1.02-1.25x; 3b7b459: 1.01-1.27x; d0f82f9, with
the Gluon path at D = 128: 1.01-1.32x).
Before the Gluon path (commit e0fa889, tl path only): 0.311 ms at N = 4096 non-causal, 96%, and 94-96%
from N = 1024 up. On shapes neither version was tuned on, with the race, it is as fast as v6 or faster
on 10 of 10 (experiments/other_shapes.csv, commits e91ce84 and f90d6a6: 1.01-1.27x); B=16 H=4 N=777
non-causal, 0.964x of v6 on the Gluon path alone, runs the tl path there, 1.02-1.03x. Again at commit
66aea0c: 9 of 10 at 1.00-1.23x, and B=4 H=8 N=4096 D=128 non-causal (tl path) at 0.995x (0.633 ms,
rounds 0.603-0.650, against v6's 0.631, 0.622-0.649: level within the rounds' spread; this shape has
measured 0.98-1.06x since commit 2bf92b9, the tl path's autotuned pick varying between processes). With
D = 128 it is at 73-78% of cuDNN non-causal (tl path: no Gluon candidate fits there).

What the H200 said about v6 before this round: v5/v6 reached 88% of cuDNN non-causal and 85% causal
at N = 4096 (0.343 and 0.216 ms against SDPA's 0.296 and 0.183). Their key loop loads K and V with
per-thread asynchronous copies (cp.async: 4 LDGSTS per iteration for 128x64 tiles with 8 warps, 8
for 64x64 with 4), synchronises the program twice per iteration (2 BAR.SYNC), and waits once per
iteration for every outstanding warpgroup MMA (one warp_group_dot_wait, pendings = 0, right after
Q K^T is issued), so in SASS no exp2 of the softmax is issued while a wgmma is in flight. Nsight
Compute, taken afterwards at N = 4096 (results/nvidia-h200/ncu/), agrees that the wait is what is
left: v6's top stall is `wait` (1.38 cycles per issued instruction) with the tensor pipe active 44%
of the time (43.0% of the tensor-core peak, 336 us); v7's is still `wait` but shorter (1.25), the
pipe active 48% (46.7% of peak, 311 us); cuDNN's pipe 51% (49.1%, 295 us) with 3 warpgroups where
v6 and v7 run 2 at 254-255 registers and one program per SM.

What changes (evidence: results/offline-sm_90/v7_feasibility/feasibility.md, every variant
compiled offline for sm_90 with Triton 3.6.0 and read from its SASS):
- TMA. Q, K, V and O are host-side TensorDescriptors over the (batch*heads, N, D) tensors with
  (1, tile, D) blocks: the loop loads K and V with 2 UTMALDG per iteration and no LDGSTS, and waits
  on an mbarrier (SYNCS) instead of cp.async's groups. The 3-D view bounds every copy at its own
  head, so the ragged last tile is zero-padded and the O store clipped by the hardware, as v6's
  boundary checks did (a flattened (B*N, D) view would read the next head's rows). Device-side
  descriptors (tl.make_tensor_descriptor) give the same loop but need triton.set_allocator and 512 B
  of global scratch per program. Not gained: Triton 3.6 puts 4 BAR.SYNC per iteration around the
  TMA issue (2 with cp.async).
- The next Q K^T before this softmax (PIPELINE_QK = 1). Triton 3.6 offers no knob on the wgmma
  waits: its pipeliner waits for all outstanding MMAs right after each Q K^T, whatever the source
  order. But with the loop software-pipelined by hand (S of tile j+1 computed before the softmax of
  tile j, the last tile peeled off), the exp2s of tile j do not depend on the MMA in flight, and
  ptxas moves 22 to 25 of the 36 MUFU.EX2 of a 128x64 iteration between the Q K^T HGMMAs and their
  wait (0 to 2 without). This is the overlap issue 6 asks for, obtained from the scheduler rather
  than asked for. It costs 30 to 50 registers per thread (128x64 with 8 warps: 151 against 116, so
  one program per SM by registers instead of two), which is why each configuration is also a
  candidate without it (PIPELINE_QK = 0) and the autotuner, on the H200, decides. It is not offered
  where it cannot help or does not fit: mma.sync configurations (fewer than 4 warps) and 128x128
  with 4 warps (two score tiles and O need 320 fp32 registers per thread: 2820 B of spills).
- Not used, because Triton 3.6 does not compile it for this kernel: tl.range(warp_specialize=True)
  (ignored at 8 warps, no ttg.warp_specialize in the TTGIR; at 4 warps the Hopper
  NVGPUWarpSpecialization pass fails, errors quoted in feasibility.md). Gluon (Triton 3.6's
  experimental lower-level language) can place the waits by hand and compiles; it is not
  interpreted, so it stays a feasibility sketch in experiments/v7_feasibility.py.
- A persistent grid compiles (programs on SM slots looping over (head, query tile) work items,
  longest causal tiles first), FlashAttentionTriton.GRID = "persistent". Measured slower at every
  shape (commit 3186851, `invoke experiment grid`, results/nvidia-h200/experiments/grid.csv, each
  variant autotuned on its own, 5 interleaved rounds with SDPA): with 2 programs per SM 0.78-0.98x
  of one program per tile (N = 4096: 0.353 against 0.318 ms non-causal, 0.208 against 0.169 causal),
  with 1 per SM 0.62-0.80x. Nothing here overlaps one work item's epilogue with the next one's loads,
  so the loop only adds its bookkeeping; it stays an option, not the default.

An experiment after v7's round (EXP2_POLY, a constexpr that is 0 in every configuration of this
version, so the kernel above is the one measured): Nsight Compute on the H200 at N = 4096 non-causal
has v7's MUFU (the XU pipe) busy 49.5% of the time and the tensor pipe 48.0%, cuDNN 52.8% and 51.1%,
with issue slots 41.5% used and the FMA pipe 16.4% (results/nvidia-h200/ncu/raw/). At D = 64 a
128x128 tile needs as many cycles of MUFU.EX2 (16 per cycle per SM) as of HGMMA, and the two take
turns more than they overlap. EXP2_POLY = 2 or 4 computes 1 column in 2 or 4 of the unmasked tiles'
exponentials with a degree-3 polynomial on the FMA and integer pipes instead (_exp2_poly; FlashAttention-4
does the same on Blackwell); offline sm_90 SASS of 128x128/4w/3s: MUFU.EX2 per unmasked iteration 132,
68, 100, instructions 858, 1307, 1083, no spills, no layout conversion of the score tile.
Measured (commit 4e2309d, `invoke experiment exp2-poly`, results/nvidia-h200/experiments/exp2_poly.csv:
the autotuner's pick and two more candidates per shape, N = 2048 and 4096, both masks, 5 interleaved
rounds): slower in all 12 cases, 0.86-0.92x with EXP2_POLY = 2 and 0.89-0.98x with 4; at N = 4096
non-causal 128x128 went from 0.320 ms to 0.371 and 0.356. Seven more instructions per emulated
exponential cost more issue slots and registers than the MUFU time they free, so no version uses it;
it stays as the recorded negative result (FA2_V7_EXP2_POLY sets it for pinned configurations).

After that, the lever Triton's own language lacks (wgmma waits placed by hand, warp specialization) was
tried in Gluon, Triton 3.6's lower-level language: kernels/_shared/gluon_forward_hopper.py, measured by
`invoke experiment gluon` (results/nvidia-h200/experiments/gluon.csv; every configuration first checked
against float64 on ragged and non-square shapes, both masks, D = 64, and D = 128 where its shared memory
fits; 11 of the 15 recorded checks, the best configuration's among them, could run D = 64 only; all
correct). The plain form
(all warps compute and issue the copies) peaked at 86% of cuDNN at N = 4096 non-causal. The
warp-specialized form (one loader warp, 2 or 3 consumer warpgroups of 64 rows each, slots released per
consumer) with 3 consumers, 128-key tiles, 3 slots and P in registers took 0.307 ms (0.304-0.311) against
cuDNN's 0.303 and this kernel's 0.317 (0.312-0.318) in the same rounds (commit 2aa5f3d): 3% faster than
v7, level with cuDNN within the spread, not ahead of it. Causal it stays behind this kernel (0.189
against 0.170 ms). In the offline SASS, with P in registers ptxas waits for P_(j-1) V_(j-1) before the
first exp2 whatever the source order; with P through shared memory every exp2 runs under that product,
but the buffers cost the slots that mattered more. A later round (the Gluon log) added
ping-pong between the consumers and a store that keeps the exp2s under the product (neither gained
beyond the spread), then, after Nsight Compute showed its SMs idle for a third of the last of 5.33
waves, a split of that wave's tiles along the keys: 103-106% of cuDNN at N = 4096 non-causal (graph
replay, 3 runs), but 91% at 2048. Then a persistent grid over work items (the next item loaded while
this one finishes): 101-109% of cuDNN non-causal at every harness length by graph replay (commit
e9eed4c), while causal this kernel stays ahead. So v7 has a third path, "gluon", for non-causal bf16 and
fp16 inputs on Hopper that the Gluon module's rules accept (gluon_applies says why not otherwise): per
input signature it times the module's three candidates (V7_CANDIDATES: 128-row tiles on a persistent
grid, the same one program per tile, 192-row tiles with the split tail) and repeats the fastest through
a lean launch. Through the harness (session 16; logs s16_call*.log) it took N = 4096 from 96% to 108-110%
and 2048 from 94% to 99%, but at N = 512 it ran at 87% of cuDNN by graph replay, as the 192-row form
does (88%), where the 128-row one made 109%: its candidates' timing, CUDA events around repeats the host could not keep
ahead of, measured the host. They are now timed with the queue filled first (fa2lab.timing.queued_ms),
and v7's autotuner too (queued_quantiles), whose pick at causal 512 and 1024 had changed from process to
process (the harness's config column: 85% and 90% of cuDNN in the processes that picked differently).
The small-N harness numbers also depend on the host keeping ahead of do_bench's 256 MB flush: with v7's
host cost per call near 1.5x SDPA's, 3 of 5 runs at N = 512 measured the host (28-37% of cuDNN,
commit aafdf46). Calling Triton's C launcher directly with each TMA descriptor encoded once per base address
(fa2lab.hostpath.DirectLauncher) cut the tl path's launch step from 18.5 to 8.7 us and its whole call to
24.5 us beside SDPA's 23.1 (hostpath/steps.csv, commit ceeb93d). The path is on by default;
FlashAttentionTriton.GLUON = False, or FA2_V7_GLUON=0 for a process, turns it off. Where it applies the
tl path is autotuned too and the faster of the two launches kept (FlashAttentionTriton.RACE_TL, on by
default; FA2_V7_RACE_TL=0 turns it off): neither path wins everywhere (B=16 H=4 N=777 above).
At head dimension 128 none of those candidates fits a block's shared memory, and until session 23 v7 ran
its tl path there at 74-82% of cuDNN non-causal. It now has candidates of its own for D = 128 (the Gluon
module's candidates_for: 64-key tiles, the persistent 128-row program and 192-row tiles with the split tail,
the best of eleven that fit; experiment gluon --D 128): 87.2/88.4/95.4% of cuDNN at N = 1024/2048/4096
in the same rounds as the tl path's 81.9/78.5/74.2% (commit d4c3d43); with lookahead on the 128-row one (session 24)
88.7/92.7/96.1% (831f436). Causal D = 128 inputs are raced between that path and the tl path (gluon_applies).
Session 27 added a third D = 128 candidate, 128-key tiles in three slots beside one query-tile buffer with O stored
from the registers (one_q, direct_store: 229760 bytes of shared memory, how cuDNN's D = 128 kernel spends its 232448),
its buffer released after each item's last Q K^T and the next item's first key tiles loaded before its queries. With
the three raced, v7's Gluon path made 88.9/96.4/102.0% of cuDNN non-causal at N = 1024/2048/4096 (experiment gluon
--D 128, ca42f11; the lookahead candidate alone 88.8/93.5/96.3% in the same rounds), Nsight Compute 120.2 us at N = 2048
against cuDNN's 112.9 (131.5 against 113.3 before) and 414.7 against 409.0 at 4096; experiment other-shapes: (2, 16,
2048, 128) 0.124 ms non-causal and 0.082 causal (cuDNN 0.117 and 0.087), (4, 8, 4096, 128) 0.463 and 0.270 ms (cuDNN
0.455 and 0.276), 1.10-1.37x v6; the test file passed natively (42 of 42).

Everything else is v6's algorithm: exp2 with the scale folded into one multiply-add, the key loop
split into a masked lower band (sliding window), unmasked tiles and masked diagonal tiles with
nothing outside visited, the head on the grid's first axis and query tiles reversed (longest
first), -inf masks with O = 0 and L = -inf for rows that see no key, L saved (B, N_q) float32 in
natural log, the optional causal sliding window, the Triton backward of kernels/_shared.

Which path runs (LAST_PATH, or last_path(), says which one the last call took):
- "gluon": non-causal, or causal raced against the tl path (RACE_TL) or at D = 128, not interpreting,
  FlashAttentionTriton.GLUON on (the default), the Gluon module's rules (bf16 or fp16 on Hopper, no sliding
  window, D = 64 or 128) and a candidate that fits the shared memory at this head dimension: the fastest of its
  candidates, timed once per input signature, unless the tl path's launch (below), raced against it on the same
  inputs, is faster (RACE_TL).
- "tma": bf16 or fp16 on a Hopper GPU (compute capability 9.x), every base pointer and every
  non-unit stride a multiple of 16 bytes (TMA's rule). Also under Triton's interpreter, which
  implements descriptor loads and stores (bounds per dimension, zero padding, clipped stores), so
  the tests check this path's indexing and masking on the CPU; the interpreter says nothing about
  TMA hardware, mbarriers, instruction scheduling or speed.
- "v6": everything else (fp32 inputs, other GPUs, misaligned inputs): v6_longest_first's module as
  committed, imported with fa2lab.versions.load("v6_longest_first") rather than copied, launched
  through its own autotuner and configurations (under the interpreter, which cannot time, with the
  query and key tiles of v7's first candidate).
FlashAttentionTriton.FORCE_PATH ("tma", "v6" or "gluon") overrides the choice, for experiments; forcing
"gluon" where it cannot run is an error naming why.

The sm_90 configurations in configs.json come from v7's own sweep on the H200 (commit db5fde1,
results/nvidia-h200/sweep/v7_hopper.csv: 625 configurations x 8 shapes, each pinned with the
PIPELINE_QK that pipelining_applies gives it, 4248 of 5000 ran). It moved the best tiles: 128x128
with 4 warps and 3 stages (no pipelined Q K^T: it does not fit there) wins 5 of the 8 shapes and is
the single winner, at 448 TFLOP/s non-causal and 405 causal at N = 4096 in the sweep's do_bench,
where v6's short list, which v7 used until then, gave it 425 and 397 in the harness. The short list
(128x64 4w 3s, 64x64 4w 3s, 128x128 4w 3s, 64x256 4w 1s) brings every shape to its best. The sm_89
entry is v6's Ada one, used only if the TMA path is forced there.
"""

import math
import os
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from fa2lab.budget import Config, accumulator_registers
from fa2lab.checks import unit_stride, validate_qkv
from fa2lab.configs import load_table, select
from fa2lab.gpu import interpreting
from fa2lab.hostpath import LeanApply, Launch, LaunchCache, compiled_or_none, run_compiled
from fa2lab.interpret import only_config
from fa2lab.launch import allocate_outputs, autotune_configs, prune_to_fit, smem_limit, strides
from fa2lab.reference import autograd_backward
from fa2lab.provenance import switch_on
from fa2lab.timing import queued_quantiles
from fa2lab.versions import load, load_shared

V6 = load("v6_longest_first")          # the fallback path, v6's module as committed
backward_kernels = load_shared("flash_backward_triton")
GLUON = load_shared("gluon_forward_hopper")   # the non-causal path (FlashAttentionTriton.GLUON, on by default)

PATHS = ("tma", "v6", "gluon")
LAST_PATH = None                       # the path the last forward call took: "tma", "v6" or "gluon"
LAST_CONFIG = None                     # and the configuration it ran (config_label)
GRIDS = ("per_tile", "persistent")
TMA_DTYPES = (torch.bfloat16, torch.float16)


def last_path():
    """The path the last FlashAttentionTriton.apply took in this process: "tma", "v6", "gluon" or None."""
    return LAST_PATH


def last_config():
    """The configuration the last FlashAttentionTriton.apply ran: "Q,K,warps,stages" and PIPELINE_QK
    for the tma path ("128,64,4,3/p1"), the same for v6's, the GluonConfig label for the Gluon path.
    The harness records it beside the path, so a run whose autotuner chose differently says so."""
    return LAST_CONFIG


def config_label(cfg: triton.Config) -> str:
    """An autotuned triton.Config as last_config() reports it."""
    pipe = cfg.kwargs.get("PIPELINE_QK")
    return Config.of_triton(cfg).key + ("" if pipe is None else f"/p{pipe}")


@triton.jit
def _exp2_poly(x):
    """2^x for x <= 0 without the MUFU: Cody-Waite range reduction and a degree-3 polynomial
    (relative error 7.5e-5, far under bf16's 3.9e-3), on the FMA and integer pipes."""
    x = tl.maximum(x, -126.0)
    t = x + 12582912.0                   # 1.5 * 2^23: x rounded to an integer j, in t's low bits
    f = x - (t - 12582912.0)             # x - j, in [-0.5, 0.5]
    p = f * 0.055171663240339314 + 0.24261112177263144
    p = p * f + 0.693260986536644
    p = p * f + 0.9999280735913126
    bits = p.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)   # times 2^j
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _exp2_split(X, Q_TILE: tl.constexpr, K_TILE: tl.constexpr, EXP2_POLY: tl.constexpr):
    """2^X with 1 column in EXP2_POLY (2 or 4) on the polynomial, the rest on the MUFU."""
    Xa, Xb = tl.split(tl.reshape(X, (Q_TILE, K_TILE // 2, 2)))        # even, odd columns
    if EXP2_POLY == 2:
        Pb = _exp2_poly(Xb)
    else:
        Xb0, Xb1 = tl.split(tl.permute(tl.reshape(Xb, (Q_TILE, 2, K_TILE // 4)), (0, 2, 1)))
        Pb = tl.reshape(tl.permute(tl.join(tl.math.exp2(Xb0), _exp2_poly(Xb1)), (0, 2, 1)), (Q_TILE, K_TILE // 2))
    return tl.reshape(tl.join(tl.math.exp2(Xa), Pb), (Q_TILE, K_TILE))


@triton.jit
def _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS, WINDOW, qk_scale,
                         K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
                         HAS_WINDOW: tl.constexpr, EXP2_POLY: tl.constexpr = 0):
    """Fold one tile of raw scores S_ij (and its V tile) into the running (O, l, m) state: v6's update.

    The unmasked copy (MASKED=False) has no compare or select; the masked copy sets invisible scores
    to -inf and keeps rows that have seen no key finite.
    """
    if MASKED:
        k_pos = (k_start + tl.arange(0, K_TILE_SIZE))[None, :]
        keep = k_pos < N_KEYS
        if is_causal:
            keep = keep & (k_pos <= q_pos)
        if HAS_WINDOW:
            keep = keep & (k_pos > q_pos - WINDOW)
        S_ij = tl.where(keep, S_ij, float("-inf"))

    # m is in log2 units of the scaled scores (v4). A row with no visible key so far has
    # m_new = -inf; subtracting 0 instead keeps exp2 at 0 for it rather than NaN.
    m_new = tl.maximum(m_acc, tl.max(S_ij, axis=1, keep_dims=True) * qk_scale)
    if MASKED:
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_sub = m_new
    if EXP2_POLY and not MASKED:
        P_ij = _exp2_split(S_ij * qk_scale - m_sub, S_ij.shape[0], K_TILE_SIZE, EXP2_POLY)
    else:
        P_ij = tl.math.exp2(S_ij * qk_scale - m_sub)
    alpha = tl.math.exp2(m_acc - m_sub)
    l_acc = alpha * l_acc + tl.sum(P_ij, axis=1, keep_dims=True)   # sum the fp32 P,
    O_acc = alpha * O_acc
    O_acc = tl.dot(P_ij.to(V_j.dtype), V_j, acc=O_acc)             # round it for the multiply
    return O_acc, l_acc, m_new


@triton.jit
def _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                      start, stop, N_KEYS, WINDOW, qk_scale,
                      D: tl.constexpr, K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
                      HAS_WINDOW: tl.constexpr, PIPELINE_QK: tl.constexpr, EXP2_POLY: tl.constexpr = 0):
    """Fold the key tiles in [start, stop) into the running (O, l, m) state.

    K and V arrive by TMA: one descriptor load per tile, bounded by this head's N_KEYS (the
    hardware pads past it with zeros).

    PIPELINE_QK: the loop is software-pipelined by hand, Q K^T of tile j+1 issued before the softmax
    of tile j (the last tile peeled off). Triton still waits for every warpgroup MMA right after that
    issue, but the softmax's exp2s do not depend on it, and ptxas moves them in between: 22 to 25 of
    the 36 MUFU.EX2 of a 128x64 iteration run while the next Q K^T is in flight (offline sm_90 SASS,
    results/offline-sm_90/v7_feasibility/), against 0 to 1 without. It costs 30 to 50 registers.
    """
    if PIPELINE_QK:
        if start < stop:
            last = start + ((stop - start - 1) // K_TILE_SIZE) * K_TILE_SIZE
            K_j = K_desc.load([head, start, 0]).reshape(K_TILE_SIZE, D)
            S_ij = tl.dot(Q_i, tl.trans(K_j))                          # raw scores, (Q_TILE, K_TILE) fp32
            for k_start in range(start, last, K_TILE_SIZE):
                V_j = V_desc.load([head, k_start, 0]).reshape(K_TILE_SIZE, D)
                K_n = K_desc.load([head, k_start + K_TILE_SIZE, 0]).reshape(K_TILE_SIZE, D)
                S_next = tl.dot(Q_i, tl.trans(K_n))                    # the next tile's scores, issued first
                O_acc, l_acc, m_acc = _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS,
                                                           WINDOW, qk_scale, K_TILE_SIZE, MASKED, is_causal,
                                                           HAS_WINDOW, EXP2_POLY)
                S_ij = S_next
            V_j = V_desc.load([head, last, 0]).reshape(K_TILE_SIZE, D)
            O_acc, l_acc, m_acc = _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, last, N_KEYS,
                                                       WINDOW, qk_scale, K_TILE_SIZE, MASKED, is_causal, HAS_WINDOW,
                                                       EXP2_POLY)
    else:
        for k_start in range(start, stop, K_TILE_SIZE):
            K_j = K_desc.load([head, k_start, 0]).reshape(K_TILE_SIZE, D)
            V_j = V_desc.load([head, k_start, 0]).reshape(K_TILE_SIZE, D)
            S_ij = tl.dot(Q_i, tl.trans(K_j))                          # raw scores, (Q_TILE, K_TILE) fp32
            O_acc, l_acc, m_acc = _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS,
                                                       WINDOW, qk_scale, K_TILE_SIZE, MASKED, is_causal,
                                                       HAS_WINDOW, EXP2_POLY)
    return O_acc, l_acc, m_acc


@triton.jit
def _attend_query_tile(Q_desc, K_desc, V_desc, O_desc, L_ptr, head, query_tile_index,
                       stride_lb, stride_lq, N_QUERIES, N_KEYS, WINDOW, qk_scale,
                       D: tl.constexpr, Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr,
                       is_causal: tl.constexpr, HAS_WINDOW: tl.constexpr, PIPELINE_QK: tl.constexpr,
                       EXP2_POLY: tl.constexpr = 0):
    """One (head, query tile) work item: v6's program body, with descriptor loads and stores."""
    q_start = query_tile_index * Q_TILE_SIZE
    Q_i = Q_desc.load([head, q_start, 0]).reshape(Q_TILE_SIZE, D)   # rows past N_QUERIES read as 0
    q_pos = (q_start + tl.arange(0, Q_TILE_SIZE))[:, None]

    O_acc = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)
    l_acc = tl.zeros((Q_TILE_SIZE, 1), dtype=tl.float32)
    m_acc = tl.full((Q_TILE_SIZE, 1), float("-inf"), dtype=tl.float32)

    # v6's three ranges of key tiles: [band_start, full_start) masked (the lower edge of a sliding
    # window), [full_start, diag_start) visible to every row (no mask), [diag_start, stop) masked
    # (the diagonal, or a ragged last tile). Nothing outside them is visited.
    full_stop = (N_KEYS // K_TILE_SIZE) * K_TILE_SIZE
    if is_causal:
        diag_start = tl.minimum((q_start // K_TILE_SIZE) * K_TILE_SIZE, full_stop)
        stop = tl.minimum(q_start + Q_TILE_SIZE, N_KEYS)
    else:
        diag_start = full_stop
        stop = N_KEYS
    if HAS_WINDOW:
        band_start = tl.minimum((tl.maximum(q_start - WINDOW + 1, 0) // K_TILE_SIZE) * K_TILE_SIZE, diag_start)
        full_start = tl.maximum(q_start + Q_TILE_SIZE - WINDOW, 0)
        full_start = tl.minimum(tl.maximum(tl.cdiv(full_start, K_TILE_SIZE) * K_TILE_SIZE, band_start), diag_start)
    else:
        band_start = 0
        full_start = 0

    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                                            band_start, full_start, N_KEYS, WINDOW, qk_scale,
                                            D=D, K_TILE_SIZE=K_TILE_SIZE, MASKED=True, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK)
    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                                            full_start, diag_start, N_KEYS, WINDOW, qk_scale,
                                            D=D, K_TILE_SIZE=K_TILE_SIZE, MASKED=False, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK, EXP2_POLY=EXP2_POLY)
    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                                            diag_start, stop, N_KEYS, WINDOW, qk_scale,
                                            D=D, K_TILE_SIZE=K_TILE_SIZE, MASKED=True, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK)

    # A row that saw no key has l = 0: its output is 0 and its L is -inf (m = -inf, log2 0 = -inf).
    O_i = O_acc / tl.where(l_acc == 0.0, 1.0, l_acc)
    L_i = tl.reshape((m_acc + tl.math.log2(l_acc)) * 0.6931471805599453, (Q_TILE_SIZE,))
    O_desc.store([head, q_start, 0], O_i.to(O_desc.dtype).reshape(1, Q_TILE_SIZE, D))  # clipped at N_QUERIES
    L_block_ptr = tl.make_block_ptr(L_ptr + head * stride_lb, shape=(N_QUERIES,), strides=(stride_lq,),
                                    offsets=(q_start,), block_shape=(Q_TILE_SIZE,), order=(0,))
    tl.store(L_block_ptr, L_i, boundary_check=(0,))


class _FitDescriptors:
    """Between the autotuner and the JIT function: give the host descriptors the block shapes of
    the configuration being launched ((1, Q_TILE_SIZE, D) for Q and O, (1, K_TILE_SIZE, D) for K
    and V). Triton's tutorial does this with a pre_hook on every triton.Config; doing it here also
    covers configurations made elsewhere (the tests pin their own)."""

    def __init__(self, fn):
        self.fn = fn
        self.arg_names = fn.arg_names

    def run(self, *args, **kwargs):
        named = dict(zip(self.arg_names, args))
        named.update(kwargs)
        fit_descriptor_blocks(named)
        return self.fn.run(*args, **kwargs)

    def warmup(self, *args, **kwargs):
        named = dict(zip(self.arg_names, args))
        named.update(kwargs)
        fit_descriptor_blocks(named)
        return self.fn.warmup(*args, **kwargs)


def fit_descriptor_blocks(named: dict) -> None:
    D, q, k = named["D"], named["Q_TILE_SIZE"], named["K_TILE_SIZE"]
    for name, tile in (("Q_desc", q), ("O_desc", q), ("K_desc", k), ("V_desc", k)):
        desc = named.get(name)
        if isinstance(desc, TensorDescriptor):
            desc.block_shape = [1, tile, D]


# The Hopper short list (configs.json; provisional until v7's own sweep), each wgmma configuration
# with and without the hand-pipelined key loop: the registers it costs (30 to 50 more per thread,
# one 8-warp program per SM instead of two) against the softmax it hides is for the autotuner, and
# the GPU session, to weigh. The pipelined form comes first, so the interpreter's tests, which check
# the first candidate of each tile pair, check it; tests/test_v7.py checks the other.
CONFIG_TABLE = load_table(Path(__file__).with_name("configs.json"))
ARCH, CANDIDATES = select(CONFIG_TABLE, smem_limit=smem_limit())
PIPELINE_CHOICES = tuple(CONFIG_TABLE["arches"][ARCH].get("pipeline_qk", [1, 0]))


# The pipelined loop holds two score tiles at once. Past this many fp32 registers per thread for
# the score tiles and the O accumulator together it spills: 128x128 with 4 warps at D = 64 holds 320
# and spills 2820 B (results/offline-sm_90/v7_feasibility/v7_candidates.csv), where every other
# wgmma candidate of the list holds 96.
PIPELINE_REGISTER_LIMIT = 160


def pipelining_applies(cfg: Config, D: int = 64) -> bool:
    """PIPELINE_QK = 1 is a candidate only on the wgmma path (4 warps or more: mma.sync has no
    in-flight product for the softmax to hide under) and where the second score tile fits."""
    second_tile = cfg.q_tile * cfg.k_tile / (32 * cfg.num_warps)
    return cfg.num_warps >= 4 and accumulator_registers(cfg, D) + second_tile <= PIPELINE_REGISTER_LIMIT


def tma_autotune_configs(configs, pipeline_choices=PIPELINE_CHOICES) -> list:
    """Each configuration with PIPELINE_QK 1 (where pipelining applies at D = 64) and 0, in that order."""
    return [triton.Config({**c.kwargs, "PIPELINE_QK": p}, num_warps=c.num_warps, num_stages=c.num_stages)
            for cfg, c in zip(configs, autotune_configs(configs)) for p in pipeline_choices
            if p == 0 or pipelining_applies(cfg)]


def prune_tma_configs(configs, named_args, **kwargs):
    """On a GPU: drop the pipelined candidates whose second score tile does not fit at this head
    dimension, then fa2lab.launch.prune_to_fit for each PIPELINE_QK choice apart (it would take the
    second of two configurations with the same tiles, warps and stages for a duplicate)."""
    D = kwargs.get("D", named_args.get("D", 64))
    configs = [c for c in configs if not c.kwargs.get("PIPELINE_QK", 1) or pipelining_applies(
        Config(c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"], c.num_warps, c.num_stages), D)] or configs
    out = []
    for p in sorted({c.kwargs.get("PIPELINE_QK", 1) for c in configs}, reverse=True):
        group = [c for c in configs if c.kwargs.get("PIPELINE_QK", 1) == p]
        out += prune_to_fit(group, named_args, **kwargs)
    return out or configs


# bf16 and fp16 share a tuning entry: the descriptors carry no .dtype for the autotuner's key, and
# the two types have the same size and tile behaviour (each still compiles its own binary).
# Candidates are timed with the host queued ahead, after SETTLE_MS of calls back to back so that each runs at the
# clock its own power draw allows (fa2lab.timing.queued_quantiles), not by Triton's do_bench.
@triton.autotune(configs=tma_autotune_configs(CANDIDATES),
                 key=["N_QUERIES", "N_KEYS", "WINDOW", "D", "is_causal", "HAS_WINDOW", "PERSISTENT"],
                 prune_configs_by={"early_config_prune": prune_tma_configs}, do_bench=queued_quantiles)
@_FitDescriptors
@triton.jit
def flash_fwd_kernel(
    # TMA descriptors over (batch*heads, N, D), block (1, tile, D); L is a plain pointer
    Q_desc, K_desc, V_desc, O_desc, L_ptr,
    # strides of L (batch, sequence)
    stride_lb, stride_lq,
    # sizes
    N_QUERIES, N_KEYS, WINDOW, BH,
    scale,
    # compile-time meta-parameters
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    is_causal: tl.constexpr,
    HAS_WINDOW: tl.constexpr,   # WINDOW is used (causal band)
    PERSISTENT: tl.constexpr,   # grid of SM slots looping over work items, instead of one program per item
    PIPELINE_QK: tl.constexpr = 1,  # key loops issue the next Q K^T before this tile's softmax (a config choice)
    EXP2_POLY: tl.constexpr = 0,    # 0; 2 or 4: 1 column in 2 or 4 of the unmasked tiles' exp2 by polynomial
):
    qk_scale = scale * 1.4426950408889634
    n_tiles = tl.cdiv(N_QUERIES, Q_TILE_SIZE)
    if PERSISTENT:
        # Work item w is query tile n_tiles - 1 - w // BH of head w % BH: every head's longest
        # causal tiles first, as v6's launch order, handed out round-robin to the programs.
        for w in range(tl.program_id(0), n_tiles * BH, tl.num_programs(0)):
            _attend_query_tile(Q_desc, K_desc, V_desc, O_desc, L_ptr, w % BH, n_tiles - 1 - w // BH,
                               stride_lb, stride_lq, N_QUERIES, N_KEYS, WINDOW, qk_scale,
                               D=D, Q_TILE_SIZE=Q_TILE_SIZE, K_TILE_SIZE=K_TILE_SIZE, is_causal=is_causal,
                               HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK, EXP2_POLY=EXP2_POLY)
    else:
        # v6's longest-first order: the head on axis 0, query tiles reversed on axis 1.
        _attend_query_tile(Q_desc, K_desc, V_desc, O_desc, L_ptr, tl.program_id(0),
                           n_tiles - 1 - tl.program_id(1),
                           stride_lb, stride_lq, N_QUERIES, N_KEYS, WINDOW, qk_scale,
                           D=D, Q_TILE_SIZE=Q_TILE_SIZE, K_TILE_SIZE=K_TILE_SIZE, is_causal=is_causal,
                           HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK, EXP2_POLY=EXP2_POLY)


# --------------------------------------------------------------------------- path selection

def _device_capability(device: torch.device):
    """(major, minor) of a CUDA device, None for any other device."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def tma_ok(t: torch.Tensor) -> bool:
    """TMA's rules for a (B, N, D) tensor: 16-byte aligned base, unit last stride, every other
    stride a multiple of 16 bytes."""
    e = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all((s * e) % 16 == 0 for s in t.stride()[:-1])


def select_path(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, force: str | None = None) -> str:
    """ "tma" or "v6" for inputs that passed validate_qkv (module docstring)."""
    if force is not None:
        if force not in PATHS:
            raise ValueError(f"FORCE_PATH must be None or one of {', '.join(PATHS)}, got {force!r}")
        if force != "gluon":   # the Gluon path is chosen before this (gluon_applies)
            return force
    if Q.dtype not in TMA_DTYPES:
        return "v6"
    if not interpreting():
        capability = _device_capability(Q.device)
        if capability is None or capability[0] != 9:
            return "v6"
    return "tma" if all(tma_ok(t) for t in (Q, K, V)) else "v6"


def persistent_programs(work_items: int, device: torch.device) -> int:
    """Programs of the persistent grid: PERSISTENT_PROGRAMS_PER_SM per SM (a small fixed number
    under the interpreter, enough for several work items per program), never more than the work."""
    if interpreting() or device.type != "cuda":
        slots = 3
    else:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        slots = sms * FlashAttentionTriton.PERSISTENT_PROGRAMS_PER_SM
    return max(1, min(work_items, slots))


# --------------------------------------------------------------------------- launches

def _descriptors(Q, K, V, O):
    """Host descriptors over the 3-D tensors; the block shapes are fitted per configuration."""
    D = Q.shape[2]
    return [TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, D]) for t in (Q, K, V, O)]


class TmaLaunch(Launch):
    """fa2lab.hostpath's lean repeat of a launch. The four descriptors are built on the first repeat
    and afterwards only their base tensors change: the cache key fixes every shape and stride, and
    the launcher turns each descriptor into a kernel parameter when it launches, so nothing keeps
    the old base. Building four TensorDescriptors (with their checks) on every call is what the
    H200's host times pointed at: v7 49-72 us per call against v6's 28-32 (commit 260ca6e)."""

    blocks: tuple = ()
    descs: list | None = None
    label: str | None = None
    path = "tma"
    config: triton.Config | None = None   # the configuration it runs
    tuner_key: tuple | None = None        # the autotuner's key it was timed for (the race updates the key's pick)

    def __call__(self, Q, K, V, need_l=True):   # the per-call hot path: no imports here
        global LAST_PATH, LAST_CONFIG
        O = torch.empty_strided(self.o_shape, self.o_stride, dtype=Q.dtype, device=Q.device)
        L = torch.empty(self.l_shape, dtype=torch.float32, device=Q.device) if need_l else self.scratch_l(Q)
        descs = self.descs
        if descs is None:
            descs = self.descs = _descriptors(Q, K, V, O)
            for d, block in zip(descs, self.blocks):
                d.block_shape = list(block)
        else:
            descs[0].base, descs[1].base, descs[2].base, descs[3].base = Q, K, V, O
        run_compiled(self.kernel, self.grid, (*descs, L, *self.tail), Q.device.index)
        LAST_PATH, LAST_CONFIG = "tma", self.label
        return O, L


class _MarkedLaunch:
    """Another path's recorded launch (v6's, the Gluon module's GluonLaunch), marking the path it took
    and its configuration."""

    def __init__(self, launch, path: str, label: str):
        self.launch, self.path, self.label = launch, path, label

    def __call__(self, Q, K, V, need_l=True):
        global LAST_PATH, LAST_CONFIG
        out = self.launch(Q, K, V, need_l)
        LAST_PATH, LAST_CONFIG = self.path, self.label
        return out


def _tma_launch(Q, K, V, is_causal, window, grid_mode):
    """The tl path: O and L of its autotuner's pick, and a list of recorded launches for the race (_kept): the
    pick's TmaLaunch, then, where the autotuner timed its candidates in this call, those of the others it timed
    within SHORTLIST_MARGIN of the pick (compiled already: each launched once, pinned). Under the interpreter
    the list is empty."""
    B, N_q, D = Q.shape
    N_k = K.shape[1]
    O, L = allocate_outputs(Q)
    descs = _descriptors(Q, K, V, O)
    persistent = grid_mode == "persistent"

    def grid(meta):
        tiles = triton.cdiv(N_q, meta["Q_TILE_SIZE"])
        return (persistent_programs(B * tiles, Q.device),) if persistent else (B, tiles)

    tail = (*L.stride(), N_q, N_k, window, B, 1.0 / math.sqrt(D))
    flags = dict(is_causal=is_causal, HAS_WINDOW=window > 0, PERSISTENT=persistent)
    keys_before = set(flash_fwd_kernel.cache)
    if interpreting() and len(flash_fwd_kernel.configs) > 1:
        # The interpreter cannot time candidates: run the first (the tests pin the one they check).
        with only_config(flash_fwd_kernel, flash_fwd_kernel.configs[0]):
            compiled = flash_fwd_kernel[grid](*descs, L, *tail, D=D, **flags)
    else:
        compiled = flash_fwd_kernel[grid](*descs, L, *tail, D=D, **flags)
    if compiled_or_none(compiled) is None:  # the interpreter launches no binary
        return O, L, []
    pick = flash_fwd_kernel.best_config
    launches = [_recorded_tma_launch(compiled, pick, grid, tail, D, flags, descs, O, L)]
    tuned = set(flash_fwd_kernel.cache) - keys_before   # the autotuner's key, where it timed its candidates just now
    if tuned:
        timings = flash_fwd_kernel.configs_timings
        for cfg in shortlist((t[0], c) for c, t in timings.items() if math.isfinite(t[0])):
            if cfg is pick:
                continue
            O2, L2 = allocate_outputs(Q)
            descs2 = _descriptors(Q, K, V, O2)
            with only_config(flash_fwd_kernel, cfg):
                compiled = flash_fwd_kernel[grid](*descs2, L2, *tail, D=D, **flags)
            launches.append(_recorded_tma_launch(compiled, cfg, grid, tail, D, flags, descs2, O2, L2))
        flash_fwd_kernel.best_config = pick   # as the autotuner left it (only_config's runs set their own)
        for launch in launches:
            launch.tuner_key = next(iter(tuned))
    return O, L, launches


def _recorded_tma_launch(compiled, cfg, grid, tail, D, flags, descs, O, L) -> "TmaLaunch":
    """The TmaLaunch that repeats `compiled` (configuration cfg, launched on descs, O and L) on other tensors
    of the same signature."""
    g = grid(cfg.kwargs)
    launch = TmaLaunch(compiled, (*g, *([1] * (3 - len(g)))), launch_tail(tail, D, cfg.kwargs, flags),
                       O.shape, O.stride(), L.shape)
    launch.blocks = tuple(tuple(d.block_shape) for d in descs)
    launch.label, launch.config = config_label(cfg), cfg
    return launch


def launch_tail(tail: tuple, D: int, meta: dict, flags: dict) -> tuple:
    """Every argument of flash_fwd_kernel after the five tensors, constexprs included, in signature
    order: what the compiled kernel's launcher takes on the lean path."""
    return (*tail, D, meta["Q_TILE_SIZE"], meta["K_TILE_SIZE"], flags["is_causal"], flags["HAS_WINDOW"],
            flags["PERSISTENT"], meta.get("PIPELINE_QK", 1), meta.get("EXP2_POLY", 0))


def _v6_launch(Q, K, V, is_causal, window):
    """v6's path. On a GPU: v6's own normal path (its autotuner, its configurations). Under the
    interpreter, which cannot time candidates: v6's kernel with the tiles of v7's first candidate
    (the one the tests pin)."""
    mode = (is_causal, window, "longest_first", 0)
    if not interpreting():
        O, L, launch = V6._checked_launch(Q, K, V, mode)
        label = config_label(V6.flash_fwd_kernel.best_config)
        return O, L, (_MarkedLaunch(launch, "v6", label) if launch is not None else None)
    cfg = flash_fwd_kernel.configs[0]
    q_tile, k_tile = cfg.kwargs["Q_TILE_SIZE"], cfg.kwargs["K_TILE_SIZE"]
    B, N_q, D = Q.shape
    O, L = allocate_outputs(Q)
    V6.flash_fwd_kernel.fn[(B, triton.cdiv(N_q, q_tile))](
        Q, K, V, O, L, *strides(Q, K, V, O, L), N_q, K.shape[1], window, 1.0 / math.sqrt(D),
        D=D, Q_TILE_SIZE=q_tile, K_TILE_SIZE=k_tile, is_causal=is_causal, HAS_WINDOW=window > 0,
        HEAD_MAJOR=True, REVERSE=True, P_CAST=0, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return O, L, None


def gluon_applies(Q, K, V, is_causal: bool, window: int, force: str | None) -> str | None:
    """None when the Gluon path takes these inputs, else why not: it is asked for (FORCE_PATH = "gluon",
    or FlashAttentionTriton.GLUON with no FORCE_PATH), a causal mask at D = 64 only when raced against the tl path
    (RACE_TL) or forced (FORCE_PATH = "gluon"), not interpreting (Gluon is not interpreted), the Gluon module's own
    rules (gluon_forward_hopper.applies), and one of its candidates fits the GPU's shared memory at this head
    dimension (D = 64 on the H200).

    Causal inputs at D = 64 stayed on the tl path from commit 538f1fa to session 30: raced against it, the tl path
    won at every causal harness shape in 4 harness runs and at every causal shape of experiment other-shapes (the
    first call of each signature compiling and timing three Gluon kernels more). Since session 30 they are raced
    again: with one inlined copy of the consumers' code (shared_code 2) the one-program-per-tile candidate made
    101.3% of cuDNN at N = 512 by do_bench (median of 4 rounds; graph replay 117.2-118.3%) where the tl path made
    89.3% (72.8-98.1%; graph 113.7-115.7%), and v7 made 98.5% there in 16 harness runs on the tl path (experiment
    gluon, 075c6a5; bench, 62e4238); from N = 1024 the tl path stays ahead (graph 138% against 123% at 1024) and
    wins the race. Without the race (FA2_V7_RACE_TL=0) they stay on the tl path. At D = 128 they take the
    Gluon path, raced against the tl path (RACE_TL): its lookahead candidate made 96.1/101.3/101.1% of cuDNN at
    N = 1024/2048/4096 where the tl path made 119.2/103.3/90.1% (experiment gluon --D 128 --causal 1, 831f436), and
    the one_q candidate 103.6/107.2/106.0% (197d2ab; the tl path 117.5/104.4/90.7% in the same rounds)."""
    if force not in (None, "gluon") or (force is None and not FlashAttentionTriton.GLUON):
        return "not asked for"
    if is_causal and force is None and Q.shape[2] < 128 and not FlashAttentionTriton.RACE_TL:
        return ("causal mask without the race against the tl path (which is faster there from N = 1024: experiment "
                "gluon; FORCE_PATH='gluon' runs it)")
    if interpreting():
        return "the interpreter cannot run Gluon"
    why = GLUON.applies(Q, K, V, window)
    if why is None and not GLUON.fitting(GLUON.candidates_for(Q.shape[2]), Q.shape[2], Q.device.index):
        why = f"no candidate fits the shared memory at head dimension {Q.shape[2]}"
    return why


# Rounds of the race (_faster_of), the launches' order reversed every other round. At causal N = 4096, timed once
# each, the Gluon launch (175 us by graph replay) won 4 races in 15 harness runs over the tl path's (171 us)
# (commit 8ae17a5); an even count gives each launch each position equally often, so a drift between the
# first and the second timing (the GPU warming) cancels in the medians.
RACE_ROUNDS = 4
# A path's candidates timed one after another drift with the clock: at causal N = 4096 the tl autotuner's first
# candidate ran at 1935-1965 MHz and its fourth at 1710-1860 (experiment tl-pick, 99d4e5d), so one process in six
# kept 64,64,4,3/p1 (189 us by graph replay) over 128,128,4,3/p0 (173 us), and the Gluon path's harness picks
# changed from run to run at non-causal 4096 (301 against 283 us, 3 runs in 15) as the tl path's did at causal 2048.
# Every candidate whose own first timing came within this fraction of its path's fastest is timed again in the
# race (shortlist): the true best came within 4.3% in each of those processes.
SHORTLIST_MARGIN = 0.10


def shortlist(timed, margin: float = SHORTLIST_MARGIN) -> list:
    """Of (ms, candidate) pairs from one path's sequential timing, the candidates within `margin` of the fastest,
    fastest first."""
    ranked = sorted(timed, key=lambda t: t[0])
    return [c for ms, c in ranked if ms <= ranked[0][0] * (1 + margin)] if ranked else []


def _faster_of(Q, K, V, *launches):
    """Of launches made on these inputs (None: a path that made none), the one with the least median of
    RACE_ROUNDS fa2lab.timing.queued_ms timings, taken in alternating order, with the O and L of a call of it.
    The fastest of the tl path's launches here also becomes its autotuner's pick for their key (tuner_key), so
    a later signature with that key starts from it."""
    from fa2lab.timing import queued_ms   # looked up per call: tests replace it

    ms = [[] for _ in launches]
    for r in range(RACE_ROUNDS):
        for i in (range(len(launches)) if r % 2 == 0 else reversed(range(len(launches)))):
            if launches[i] is not None:
                ms[i].append(queued_ms(lambda launch=launches[i]: launch(Q, K, V)))
    medians = [statistics.median(m) if m else math.inf for m in ms]
    tl = [(m, launch) for m, launch in zip(medians, launches) if getattr(launch, "tuner_key", None) is not None]
    if tl:
        fastest = min(tl, key=lambda t: t[0])[1]
        flash_fwd_kernel.cache[fastest.tuner_key] = flash_fwd_kernel.best_config = fastest.config
    launch = launches[medians.index(min(medians))]
    O, L = launch(Q, K, V)   # after the timing's calls, this one records the path and configuration that won
    return O, L, launch


def _kept(Q, K, V, O, L, launches: list):
    """O, L and the launch a signature keeps: the race's winner among `launches` (its own O and L), or the only
    launch (O and L as they are), or None (the interpreter: nothing to repeat)."""
    global LAST_PATH, LAST_CONFIG
    if len(launches) > 1:
        return _faster_of(Q, K, V, *launches)
    if launches:
        LAST_PATH, LAST_CONFIG = launches[0].path, launches[0].label
    return O, L, (launches[0] if launches else None)


def _checked_launch(Q, K, V, mode):
    """The normal path: check, choose the path, allocate, autotune (first time per key), launch.
    Returns O, L and the launch that repeats it (see fa2lab.hostpath)."""
    global LAST_PATH, LAST_CONFIG
    is_causal, window, grid_mode, force, _, race_tl = mode
    validate_qkv(Q, K, V)
    Q, K, V = (unit_stride(t) for t in (Q, K, V))
    why_not_gluon = gluon_applies(Q, K, V, is_causal, window, force)
    if why_not_gluon is None:   # each candidate timed once per input signature, the shortlist raced (_kept)
        O, L, _, timed = GLUON.best_launch(Q, K, V, is_causal)
        launches = [_MarkedLaunch(launch, "gluon", launch.label) for launch in shortlist(timed.values())]
        if race_tl and force is None and select_path(Q, K, V, None) == "tma":
            launches += _tma_launch(Q, K, V, is_causal, window, grid_mode)[2]
        return _kept(Q, K, V, O, L, launches)
    if force == "gluon":
        raise ValueError(f"FORCE_PATH='gluon' cannot run these inputs: {why_not_gluon}")
    path = select_path(Q, K, V, force)
    LAST_PATH, LAST_CONFIG = path, None   # the configuration stays None under the interpreter
    if path == "tma":
        return _kept(Q, K, V, *_tma_launch(Q, K, V, is_causal, window, grid_mode))
    O, L, launch = _v6_launch(Q, K, V, is_causal, window)
    LAST_CONFIG = getattr(launch, "label", None)
    return O, L, launch


class FlashAttentionTriton(LeanApply, torch.autograd.Function):
    GRID = "per_tile"                # "persistent": SM slots loop over work items (an experiment)
    PERSISTENT_PROGRAMS_PER_SM = 2   # programs per SM of the persistent grid (2 beat 1: experiments/grid.csv)
    FORCE_PATH = None                # None (the rules above), "tma", "v6" or "gluon"
    # The Gluon path for non-causal inputs (kernels/_shared/gluon_forward_hopper.py, V7_CANDIDATES), on
    # where it applies; FA2_V7_GLUON=0 turns it off for a process (the tl path's numbers before it).
    GLUON = switch_on("GLUON")
    # Where the Gluon path applies, also autotune the tl path and keep whichever launch is faster
    # (_faster_of): at B=16 H=4 N=777 the tl path won, 1.03x v6 where the Gluon path alone made 0.96x
    # (experiment other-shapes, commits 025f35e and e91ce84). FA2_V7_RACE_TL=0 turns it off for a process.
    RACE_TL = switch_on("RACE_TL")
    BACKWARD_DQ_MODE = "auto"        # flash_backward_triton.DQ_CHOICES: "auto" fuses the small problems
    BACKWARD_CONFIG = None           # a backward_kernels.BackwardConfig, or None for its per-GPU default
    # Input signature -> the launch the normal path made for it (see fa2lab.hostpath).
    launches = LaunchCache()

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False, window_size=None):
        window = 0 if window_size is None else int(window_size)
        if window_size is not None and (window < 1 or not is_causal):
            raise ValueError(f"window_size={window_size!r}: a sliding window is a causal band of at least one "
                             "key (query i sees keys i - window < j <= i); pass is_causal=True and window_size >= 1")
        if FlashAttentionTriton.GRID not in GRIDS:
            raise ValueError(f"GRID must be one of {', '.join(GRIDS)}")
        mode = (bool(is_causal), window, FlashAttentionTriton.GRID, FlashAttentionTriton.FORCE_PATH,
                FlashAttentionTriton.GLUON, FlashAttentionTriton.RACE_TL)
        O, L = FlashAttentionTriton.launches(Q, K, V, mode, _checked_launch, ctx)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.is_causal = bool(is_causal)
        ctx.window = window
        return O

    @staticmethod
    def backward(ctx, dO):
        if ctx.window:   # the Triton backward has no sliding-window mask
            return autograd_backward(ctx, dO)
        Q, K, V, O, L = ctx.saved_tensors
        dQ, dK, dV = backward_kernels.backward_after_forward(
            ctx.launch_key, Q, K, V, O, L, dO, ctx.is_causal, FlashAttentionTriton.BACKWARD_CONFIG,
            FlashAttentionTriton.BACKWARD_DQ_MODE, all(ctx.needs_input_grad[:3]))
        return dQ, dK, dV, None, None


# --------------------------------------------------------------------------- offline compiles

def offline_compile_args(N: int, D: int, dtype: str, batch: int, cfg, causal: bool):
    """For profiling/inspect_kernel.py: flash_fwd_kernel's positional arguments for contiguous
    (batch, N, D) tensors, as descriptors over 'meta' tensors (no memory, no GPU) with the
    configuration's block shapes, and the constexprs beyond D, tiles and is_causal: the default grid,
    no window, and config_kwargs's PIPELINE_QK (inspect_kernel's --config has no field for it)."""
    from fa2lab.compile_offline import DTYPES

    tdt = getattr(torch, DTYPES[dtype])
    Q, K, V, O = (torch.empty(batch, N, D, dtype=tdt, device="meta") for _ in range(4))
    L = torch.empty(batch, N, dtype=torch.float32, device="meta")
    descs = _descriptors(Q, K, V, O)
    fit_descriptor_blocks({"Q_desc": descs[0], "K_desc": descs[1], "V_desc": descs[2], "O_desc": descs[3],
                           "D": D, "Q_TILE_SIZE": cfg.q_tile, "K_TILE_SIZE": cfg.k_tile})
    args = (*descs, L, *L.stride(), N, N, 0, batch, 1.0 / math.sqrt(D))
    return args, {"HAS_WINDOW": False, "PERSISTENT": False, **config_kwargs(cfg, D)}


def config_kwargs(cfg, D: int = 64) -> dict:
    """The constexprs beyond the tiles that one pinned configuration needs (fa2lab.launch.pin_config:
    the profile drivers' --config and the sweep): PIPELINE_QK = 1 where pipelining_applies, else 0,
    unless FA2_V7_PIPELINE_QK says otherwise (so a sweep can be run once with each)."""
    return {"PIPELINE_QK": int(os.environ.get("FA2_V7_PIPELINE_QK", int(pipelining_applies(cfg, D)))),
            "EXP2_POLY": int(os.environ.get("FA2_V7_EXP2_POLY", 0))}   # 0: v7 as measured (see EXP2_POLY)
