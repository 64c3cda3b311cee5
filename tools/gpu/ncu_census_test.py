#!/usr/bin/env python3
"""Tests of ncu_census.py on a raw page written here (no GPU, no ncu)."""

import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_census  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","dram__bytes.sum",'
          '"dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum",'
          '"sm__throughput.avg.pct_of_peak_sustained_elapsed",'
          '"sm__warps_active.avg.pct_of_peak_sustained_active"')
UNITS = '"","","","","","","","","","","","Mbyte","%","usecond","%","%"'
LONG = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<" + "x" * 80 + ">>(T1)"


def launch(i, name, mbytes, dram, us, sm, occ):
    return (f'"{i}","1","decode_gpu","host","{name}","1","7","(256, 1, 1)","(10, 1, 1)","0",'
            f'"9.0","{mbytes}","{dram}","{us}","{sm}","{occ}"')


PAGE = "\n".join([
    "==PROF== Connected to process 1 (decode_gpu)",
    HEADER,
    UNITS,
    launch(0, "void weir::Swiglu<true>(const float *, int)", "60", "20", "200", "10", "50"),
    launch(1, LONG, "100", "30", "1,000", "80", "25"),
    launch(2, "void weir::Swiglu<true>(const float *, int)", "60", "40", "100", "10", "70"),
    launch(3, "void weir::Tiny()", "", "n/a", "3", "1", "5"),
])


class CensusTest(unittest.TestCase):
    def test_groups_and_weights(self):
        groups = ncu_census.census(ncu_census.read_launches(io.StringIO(PAGE)))
        names = [g[0] for g in groups]
        self.assertEqual(len(groups), 3)
        # Longest total first: the CUTLASS kernel (1,000 us, thousands separator read).
        self.assertTrue(names[0].startswith("cutlass::device_kernel<"))
        self.assertIn("~", names[0])  # cut, told apart by a hash
        self.assertLessEqual(len(names[0]), 64)
        name, count, total, s = groups[1]
        self.assertEqual(name, "weir::Swiglu<true>")  # no "void ", no parameters
        self.assertEqual(count, 2)
        self.assertAlmostEqual(total, 300.0)
        # DRAM % weighted by duration: (20 * 200 + 40 * 100) / 300.
        self.assertAlmostEqual(s[ncu_census.DRAM_PCT], 8000 / 300)
        self.assertAlmostEqual(s[ncu_census.DRAM_BYTES], 120e6)
        # A launch with no numbers keeps what it has.
        tiny = groups[2]
        self.assertEqual(tiny[0], "weir::Tiny")
        self.assertNotIn(ncu_census.DRAM_PCT, tiny[3])
        self.assertNotIn(ncu_census.DRAM_BYTES, tiny[3])

    def test_format_and_main(self):
        text = ncu_census.format_census(
            ncu_census.census(ncu_census.read_launches(io.StringIO(PAGE))))
        lines = text.splitlines()
        self.assertEqual(len(lines), 5)
        swiglu = [l for l in lines if "Swiglu" in l][0].split()
        # us, n, mean, MB a launch, GB/s (120 MB over 300 us = 400 GB/s).
        self.assertEqual(swiglu[:5], ["300.0", "2", "150.0", "60.00", "400"])
        self.assertIn("-", [l for l in lines if "Tiny" in l][0].split())
        self.assertIn("4 launches in all (3 kernels)", lines[-1])
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(PAGE)
        try:
            self.assertEqual(ncu_census.main([f.name, "--top", "2"]), 0)
        finally:
            os.unlink(f.name)
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(HEADER + "\n" + UNITS + "\n")
        try:
            self.assertEqual(ncu_census.main([f.name]), 1)
        finally:
            os.unlink(f.name)

    def test_nanoseconds_by_default(self):
        page = PAGE.replace('"usecond"', '"nsecond"')
        groups = ncu_census.census(ncu_census.read_launches(io.StringIO(page)))
        self.assertAlmostEqual(groups[0][2], 1.0)


if __name__ == "__main__":
    unittest.main()
