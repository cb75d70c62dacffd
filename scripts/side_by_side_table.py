"""The table of docs/performance.md from scripts/side-by-side.sh's JSON lines: per shape and
client, the range (min-max) of each figure over the runs."""
import json,sys,collections
rows=[json.loads(l) for l in open(sys.argv[1])]
g=collections.defaultdict(list)
for r in rows: g[(r['_shape'],r['_client'])].append(r)
def rng(vals,fmt):
    vals=[v for v in vals if v is not None]
    if not vals: return 'n/a'
    lo,hi=min(vals),max(vals)
    return (fmt%lo) if fmt%lo==fmt%hi else (fmt%lo)+'–'+(fmt%hi)
print('| scenario | client | runs | load avg | CPU/token µs (streaming) | user+kernel µs | gap err p50 µs | p99 µs | max ms | coalesced | TTFT err vs arrival mean ms | TTFT err vs first write mean ms | wake-up p99 µs |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|')
for (shape,client),rs in sorted(g.items()):
    print('| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |'%(shape,client,len(rs),
      rng([r['_load'] for r in rs],'%.2f'),
      rng([r['client_cpu_ns_per_token']/1000 for r in rs],'%.2f'),
      rng([r['client_cpu_user_ns_per_token']/1000 for r in rs],'%.2f')+' + '+rng([r['client_cpu_sys_ns_per_token']/1000 for r in rs],'%.2f'),
      rng([r['gap_error_us_p50'] for r in rs],'%.0f'),
      rng([r['gap_error_us_p99'] for r in rs],'%.0f'),
      rng([r['gap_error_us_max']/1000 for r in rs],'%.2f'),
      rng([r.get('coalesced_gaps') for r in rs],'%d'),
      rng([r['ttft_arrival_error_ms_mean'] for r in rs],'%.2f'),
      rng([r.get('ttft_error_ms_mean') for r in rs],'%.3f'),
      rng([r.get('client_wakeup_us_p99') for r in rs],'%.0f')))
