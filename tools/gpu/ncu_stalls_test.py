#!/usr/bin/env python3
"""Tests of ncu_stalls.py on a source page written here (no GPU, no ncu)."""

import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_stalls  # noqa: E402

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)",'
          '"Warp Stall Sampling (Not-issued Samples)","Instructions Executed",'
          '"stall_branch_resolving","stall_selected","stall_short_sb","stall_wait",'
          '"stall_selected (Not Issued)"')


def row(address, source, samples, executed, branch=0, selected=0, short_sb=0, wait=0):
    # The "(Not Issued)" column repeats a reason and must not be counted twice.
    return (f'"{address:#x}","{source}","{samples}","0","{executed}","{branch}",'
            f'"{selected}","{short_sb}","{wait}","{selected}"')


BASE = 0x7F0000000000
PAGE = "\n".join([
    '"Kernel Name","void Gemm(Args)"',
    HEADER,
    row(BASE + 0x00, "MOV R1, RZ", 10, 1, wait=10),
    row(BASE + 0x10, "HGMMA.64x128x16.F32 R24, gdesc[UR4], RZ, !UPT, gsb0", 40, 100, selected=5),
    row(BASE + 0x20, "FFMA R1, R2, R3, R4", "1,010", 100, selected=10, short_sb="1,000"),
    row(BASE + 0x30, f"@P0 BRA {BASE + 0x10:#x}", 10, 100, branch=10),
    row(BASE + 0x40, f"@!P1 BRA {BASE:#x}", 5, 10, wait=5),
    row(BASE + 0x50, "EXIT", 5, 1),
    '"Kernel Name","void Copy(Args)"',
    HEADER,
    row(BASE + 0x100, "LDG.E R2, desc[UR4][R2.64]", 7, 1, wait=7),
    row(BASE + 0x110, "EXIT", 1, 1),
])


# A loop, then straight-line code in two 4 KB regions of offsets.
REGIONS_PAGE = "\n".join([
    '"Kernel Name","void Epilogue(Args)"',
    HEADER,
    row(BASE + 0x00, "HGMMA.64x128x16.F32 R24, gdesc[UR4], RZ, !UPT, gsb0", 10, 10),
    row(BASE + 0x10, f"@P0 BRA {BASE:#x}", 10, 10, branch=10),
    row(BASE + 0x20, "FFMA R1, R2, R3, R4", 100, 1, wait=90),
    row(BASE + 0x1000, "STG.E desc[UR4][R2.64], R1", 50, 1, wait=50),
    row(BASE + 0x1010, "EXIT", 1, 1),
])


class NcuStallsTest(unittest.TestCase):
    def test_reads_each_kernel_and_its_rows(self):
        kernels = ncu_stalls.read_kernels(io.StringIO(PAGE))
        self.assertEqual([name for name, _ in kernels], ["void Gemm(Args)", "void Copy(Args)"])
        self.assertEqual(len(kernels[0][1]), 6)
        self.assertEqual(kernels[0][1][2].samples, 1010)  # thousands separators
        self.assertEqual(kernels[0][1][3].opcode, "BRA")  # predicate skipped
        self.assertEqual(kernels[0][1][1].opcode, "HGMMA")

    def test_the_loop_is_the_smallest_holding_a_tensor_op(self):
        gemm = ncu_stalls.read_kernels(io.StringIO(PAGE))[0][1]
        self.assertEqual(ncu_stalls.tensor_loop(gemm), (1, 3))
        result = ncu_stalls.analyze(gemm, top=3)
        loop = result["loop"]
        self.assertEqual(result["total"], 1080)
        self.assertEqual((loop["first"], loop["last"], loop["instructions"]), (0x10, 0x30, 3))
        self.assertEqual(loop["samples"], 1060)
        # 1,000 short_sb; 15 selected (the Not Issued copy ignored); 10 branch;
        # HGMMA's 35 samples no column names.
        self.assertEqual(loop["reasons"]["short_sb"], 1000)
        self.assertEqual(loop["reasons"]["selected"], 15)
        self.assertEqual(loop["reasons"]["branch_resolving"], 10)
        self.assertEqual(loop["reasons"]["unattributed"], 35)
        self.assertEqual(loop["reasons"]["wait"], 0)
        self.assertEqual(loop["opcodes"]["FFMA"], 1010)
        self.assertEqual(loop["opcodes"]["HGMMA"], 40)
        self.assertEqual(loop["opcodes"]["BRA"], 10)
        self.assertEqual([offset for offset, *_ in result["top"]], [0x20, 0x10, 0x00])

    def test_the_kernels_reasons_count_every_instruction(self):
        gemm = ncu_stalls.read_kernels(io.StringIO(PAGE))[0][1]
        reasons = ncu_stalls.analyze(gemm)["reasons"]
        self.assertEqual(reasons["short_sb"], 1000)
        self.assertEqual(reasons["wait"], 15)  # MOV's 10, the outer BRA's 5
        self.assertEqual(reasons["selected"], 15)
        self.assertEqual(reasons["branch_resolving"], 10)
        self.assertEqual(reasons["unattributed"], 40)  # HGMMA's 35, EXIT's 5

    def test_the_code_outside_the_loop_by_region(self):
        code = ncu_stalls.read_kernels(io.StringIO(REGIONS_PAGE))[0][1]
        result = ncu_stalls.analyze(code)
        self.assertEqual(result["loop"]["samples"], 20)
        regions = result["regions"]
        self.assertEqual([(first, last, samples) for first, last, samples, _ in regions],
                         [(0, 0x1000, 100), (0x1000, 0x2000, 51)])
        self.assertEqual(regions[0][3]["wait"], 90)
        self.assertEqual(regions[0][3]["unattributed"], 10)
        self.assertEqual(regions[1][3]["wait"], 50)
        # 16-byte regions: one an instruction, and EXIT's (1 of 171 samples,
        # under 1 %) left out.
        small = ncu_stalls.analyze(code, region=0x10)["regions"]
        self.assertEqual([(first, last, samples) for first, last, samples, _ in small],
                         [(0x20, 0x30, 100), (0x1000, 0x1010, 50)])
        out = io.StringIO()
        ncu_stalls.print_report("void Epilogue(Args)", result, out)
        self.assertIn("0x01000..0x02000        51  29.8 %  wait 98.0 %", out.getvalue())
        self.assertIn("the kernel's samples by stall reason", out.getvalue())

    def test_branch_targets_print_as_offsets(self):
        gemm = ncu_stalls.read_kernels(io.StringIO(PAGE))[0][1]
        texts = [text for _, _, _, text in ncu_stalls.analyze(gemm, top=6)["top"]]
        self.assertIn("@P0 BRA 0x0010", texts)

    def test_a_kernel_without_tensor_ops_has_no_loop(self):
        copy = ncu_stalls.read_kernels(io.StringIO(PAGE))[1][1]
        result = ncu_stalls.analyze(copy)
        self.assertIsNone(result["loop"])
        out = io.StringIO()
        ncu_stalls.print_report("void Copy(Args)", result, out)
        self.assertIn("no tensor-core loop", out.getvalue())

    def test_main_prints_every_kernel_and_refuses_a_page_without_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            page = os.path.join(tmp, "page.csv")
            with open(page, "w") as f:
                f.write(PAGE)
            out = io.StringIO()
            stdout, sys.stdout = sys.stdout, out
            try:
                self.assertEqual(ncu_stalls.main([page]), 0)
            finally:
                sys.stdout = stdout
            printed = out.getvalue()
            self.assertIn("tensor-core loop 0x0010..0x0030 (3 instructions): 1060 samples", printed)
            self.assertIn("void Copy(Args)", printed)
            empty = os.path.join(tmp, "empty.csv")
            with open(empty, "w") as f:
                f.write('"==PROF== nothing profiled"\n')
            self.assertEqual(ncu_stalls.main([empty]), 1)


if __name__ == "__main__":
    unittest.main()
