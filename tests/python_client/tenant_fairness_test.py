"""Tenant fair share on a real cluster: one tenant floods, another keeps its latency.

The coordinator (1 worker, EPLB, the tiny model) runs with --max_running_per_tenant=1
and a prefill tried after every decode step. A quiet tenant's median end-to-end latency
(32 tokens) is measured alone (before and after), then while 6 client threads of a
flooding tenant keep its queue full: it must stay within 2x of alone (the quiet request
is admitted at once, beside at most one flood sequence). The same requests sent as the
flooding tenant wait behind its queue: much slower, which shows the measurement sees the
queue.

Latency is counted in the step loop's steps (GetServerState.steps read before and after
each request; the requests run one at a time), not in seconds: fair share is decided by
admission, so a step count measures it whatever else loads the machine, while on 2 shared
CPU cores a step of 2 rows costs more time than one of 1 and other load moves wall time
by more than the bound. The wall-clock medians are printed beside the step counts.
Measured: alone 33 steps (~0.25 s on an idle machine), during the flood 34, as the
flooding tenant about 1,200.

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

    def state(self):
        return self.stub.GetServerState(inference_pb2.GetServerStateRequest(),
                                        timeout=RPC_TIMEOUT_S)

    def latency(self, tenant, i):
        """(steps, seconds) from before the request to after its final event."""
        steps = self.state().steps
        start = time.monotonic()
        events = list(self.stub.Generate(request(tenant, 32, i), timeout=RPC_TIMEOUT_S))
        seconds = time.monotonic() - start
        self.assertTrue(events[-1].HasField("final"))
        self.assertEqual(events[-1].final.usage.completion_tokens, 32)
        return self.state().steps - steps, seconds

    def latencies(self, tenant, samples=SAMPLES):
        return [self.latency(tenant, i) for i in range(samples)]

    def waiting(self):
        state = self.state()
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
            crowded = self.latencies("quiet")
            # The same requests as the flooding tenant: behind its queue.
            as_flood = self.latencies("flood", samples=2)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=RPC_TIMEOUT_S)
        alone += self.latencies("quiet")

        def p50(samples, k):
            return statistics.median(s[k] for s in samples)

        print(f"quiet tenant p50: alone {p50(alone, 0)} steps ({p50(alone, 1) * 1000:.0f} ms), "
              f"during the flood {p50(crowded, 0)} steps ({p50(crowded, 1) * 1000:.0f} ms, "
              f"{p50(crowded, 0) / p50(alone, 0):.2f}x in steps); the same requests as the "
              f"flooding tenant {p50(as_flood, 0)} steps ({p50(as_flood, 1) * 1000:.0f} ms); "
              f"{len(flood_done)} flood requests done")
        # A request of 32 tokens needs a prefill and 31 decode steps at least.
        self.assertGreaterEqual(p50(alone, 0), 32)
        self.assertLessEqual(p50(crowded, 0), 2 * p50(alone, 0))
        self.assertGreater(p50(as_flood, 0), 2 * p50(alone, 0))


if __name__ == "__main__":
    unittest.main()
