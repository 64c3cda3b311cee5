"""Tenant fair share on a real cluster: one tenant floods, another keeps its latency.

The coordinator (1 worker, EPLB, the tiny model) runs with --max_running_per_tenant=1
and a prefill tried after every decode step. A quiet tenant's median end-to-end latency
(32 tokens) is measured alone (before and after), then while 6 client threads of a
flooding tenant keep its queue full: it must stay within 2x of alone (the quiet request
is admitted at once, beside at most one flood sequence). The same requests sent as the
flooding tenant wait behind its queue: much slower, which shows the measurement sees the
queue. Measured: 1.5-1.8x (alone ~0.2 s, as the flooding tenant ~7 s); on 2 CPU cores a
step of 2 rows costs more than one of 1, so other load on the machine can push it past
2x (the target is met by admission, not by spare compute): the test runs exclusive.

Environment: as api_client_test (tests/python_client/run_test.sh).
"""

import os
import statistics
import sys
import threading
import time
import unittest

sys.path.insert(0, os.environ["WEIR_PYGEN_DIR"])

import grpc  # noqa: E402
from proto import inference_pb2, inference_pb2_grpc  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_client_test import Cluster  # noqa: E402

RPC_TIMEOUT_S = 300
FLOOD_THREADS = 6
# --max_running_per_tenant. On 2 shared CPU cores a step's time grows with its
# rows (2 workers, cap 2: 2.4x alone measured; cap 1: 1.7x); on GPUs it barely does.
CAP = 1
SAMPLES = 12


def request(tenant, max_new_tokens, seed):
    r = inference_pb2.GenerateRequest(tenant=tenant)
    r.tokens.ids.extend([5 + seed % 7, 17, 23, 42 + seed % 11])
    r.sampling.temperature = 0.0
    r.stop.max_new_tokens = max_new_tokens
    r.stop.ignore_eos = True
    return r


class TenantFairnessTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(workers=1, extra_args=[
            f"--max_running_per_tenant={CAP}",
            # A new request's prefill runs at the next step (the default
            # waits up to 70 decode steps, which would dominate a short
            # request's latency under any load).
            "--prefill_attempt_interval=1", "--prefill_any_attempt_interval=1"])
        self.cluster.start()
        self.stub = inference_pb2_grpc.InferenceStub(self.cluster.channel)

    def tearDown(self):
        self.cluster.shutdown(expected_children=self.cluster.workers + 1)

    def latency(self, tenant, i):
        start = time.monotonic()
        events = list(self.stub.Generate(request(tenant, 32, i), timeout=RPC_TIMEOUT_S))
        self.assertTrue(events[-1].HasField("final"))
        self.assertEqual(events[-1].final.usage.completion_tokens, 32)
        return time.monotonic() - start

    def latencies(self, tenant, samples=SAMPLES):
        return [self.latency(tenant, i) for i in range(samples)]

    def waiting(self):
        state = self.stub.GetServerState(inference_pb2.GetServerStateRequest(),
                                         timeout=RPC_TIMEOUT_S)
        return sum(g.waiting for g in state.per_group), sum(g.running for g in state.per_group)

    def test_a_flooding_tenant_does_not_slow_another_more_than_2x(self):
        self.latency("quiet", 99)  # warm-up
        # Alone before and after the flood: the machine's other load moves both.
        alone = self.latencies("quiet")

        stop = threading.Event()
        flood_done = []

        def flood(k):
            i = 0
            while not stop.is_set():
                try:
                    list(self.stub.Generate(request("flood", 200, k * 1000 + i),
                                            timeout=RPC_TIMEOUT_S))
                    flood_done.append(1)
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                i += 1

        threads = [threading.Thread(target=flood, args=(k,), daemon=True)
                   for k in range(FLOOD_THREADS)]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 60
            while self.waiting()[0] < FLOOD_THREADS // 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            waiting, running = self.waiting()
            self.assertGreaterEqual(waiting, FLOOD_THREADS // 2, "the flood never queued")
            self.assertLessEqual(running, CAP, "more flood sequences running than the cap")
            crowded = statistics.median(self.latencies("quiet"))
            # The same requests as the flooding tenant: behind its queue.
            as_flood = statistics.median(self.latencies("flood", samples=2))
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=RPC_TIMEOUT_S)
        alone = statistics.median(alone + self.latencies("quiet"))
        print(f"quiet tenant p50: alone {alone * 1000:.0f} ms, during the flood "
              f"{crowded * 1000:.0f} ms ({crowded / alone:.2f}x); the same requests as the "
              f"flooding tenant {as_flood * 1000:.0f} ms; {len(flood_done)} flood requests done")
        self.assertLessEqual(crowded, 2 * alone)
        self.assertGreater(as_flood, crowded)


if __name__ == "__main__":
    unittest.main()
