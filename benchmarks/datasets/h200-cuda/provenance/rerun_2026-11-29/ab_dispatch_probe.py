"""One reading of the host's pace on the lent H200 machine, run between the A/B invocations
(an experiment kept with its output, ab_dispatch_probe.txt; not product code): a 64x64 fp32
matmul on the GPU, 64 launches then a synchronize, median of 8 batches (its time is the host's
dispatch), and a 512x512 fp32 matmul on one host thread, median of 8 calls."""
import statistics
import sys
import time

import torch

a = torch.full((64, 64), 0.5, device="cuda")
b = torch.full((64, 64), 0.25, device="cuda")
torch.mm(a, b)
torch.cuda.synchronize()
ts = []
for _ in range(8):
    t = time.perf_counter()
    for _ in range(64):
        torch.mm(a, b)
    torch.cuda.synchronize()
    ts.append(time.perf_counter() - t)
med = statistics.median(ts)
torch.set_num_threads(1)
c = torch.full((512, 512), 0.5)
d = torch.full((512, 512), 0.25)
torch.mm(c, d)
cs = []
for _ in range(8):
    t = time.perf_counter()
    torch.mm(c, d)
    cs.append(time.perf_counter() - t)
print(f"{sys.argv[1]} {time.strftime('%H:%M:%S')} gpu64mm {64*2*64**3/med/1e9:.2f} GFLOP/s {med/64*1e6:.2f} us/launch; "
      f"cpu1t512mm {2*512**3/statistics.median(cs)/1e9:.2f} GFLOP/s", flush=True)
