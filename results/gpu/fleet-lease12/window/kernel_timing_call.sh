# The device call (call 25 of the twelfth lease, code e76e209) as it was sent, verbatim. It printed its figure
# and wrote no file; the call's returned output is kernel_timing_call.out. A second call that would have written
# JSON found the machine given back and too little device time to start another.
export PYTHONPATH=/root/site:$PWD; timeout 90 python3 - <<'PY' 2>&1 | grep -v Warn | tail -5
import numpy as np, torch
from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func as fa
from vllm.v1.attention.ops.merge_attn_states import merge_attn_states as mg
from serve_app.model.engines.vllm_window_attention import plan_windows, window_attention, window_tensors
H,KV,D,BS,P=28,4,128,16,508
rng=np.random.default_rng(0); rows=[]; nb=1
for w in range(64):
    sh=list(range(nb,nb+P)); nb+=P
    for q in range(3):
        c=P*BS+int(rng.integers(20,276)); o=c//BS+1-P; rows.append((sh+list(range(nb,nb+o)),c)); nb+=o
t=np.zeros((len(rows),max(len(r[0]) for r in rows)),np.int32)
for i,r in enumerate(rows): t[i,:len(r[0])]=r[0]
comp=np.array([r[1] for r in rows]); sch=np.ones(len(rows),int)
d=torch.device("cuda"); k=torch.randn(nb,BS,KV,D,dtype=torch.bfloat16,device=d); v=torch.randn_like(k)
q=torch.randn(len(rows),H,D,dtype=torch.bfloat16,device=d)
cu=torch.arange(len(rows)+1,dtype=torch.int32,device=d); sl=torch.tensor(comp+1,dtype=torch.int32,device=d); bt=torch.tensor(t,device=d)
mk=int(sl.max()); out=torch.empty_like(q)
plain=lambda: fa(q=q,k=k,v=v,out=out,cu_seqlens_q=cu,max_seqlen_q=1,seqused_k=sl,max_seqlen_k=mk,softmax_scale=D**-.5,causal=True,block_table=bt,fa_version=3)
p=plan_windows(t,sch,comp,BS); w=window_tensors(p,bt,sl)
win=lambda: window_attention(q,k,v,out,cu,1,mk,w,D**-.5,0.0,fa,mg,fa_version=3)
def tm(f,n=200):
    for _ in range(10): f()
    torch.cuda.synchronize(); s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True); s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e)/n
a=tm(plain); b=tm(win)
print(f"192 seqs (64 windows x 3), prefix {P*BS}: plain {a:.3f} ms/layer, window {b:.3f} ms/layer, x{a/b:.2f}; x28 layers: {28*a:.1f} vs {28*b:.1f} ms")
PY
