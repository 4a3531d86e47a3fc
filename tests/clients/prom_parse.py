"""Parses a Prometheus text exposition from stdin with the official `prometheus_client`
parser (used by tests/tests/progress.rs). Prints one JSON object: {"<sample name>{labels}": value}.
A parse error exits non-zero with the parser's message."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
