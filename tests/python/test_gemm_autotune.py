"""test_gemm_autotune.py — the process's GEMM autotuning setting from Python (CI, no GPU needed): off by
default, set and read back, a count outside 0 or 2-32 a ValueError naming it."""
import pytest

import flashtrain


def test_off_by_default_then_set_and_read_back():
    assert flashtrain.gemm_autotune() == 0
    flashtrain.set_gemm_autotune(8)
    assert flashtrain.gemm_autotune() == 8
    flashtrain.set_gemm_autotune(0)
    assert flashtrain.gemm_autotune() == 0


@pytest.mark.parametrize("count", [1, 33, -1])
def test_bad_count_is_a_value_error(count):
    with pytest.raises(ValueError, match=rf"GEMM autotuning times 2 to 32 candidates per problem, or is off \(0\); "
                                         rf"given {count}"):
        flashtrain.set_gemm_autotune(count)
    assert flashtrain.gemm_autotune() == 0
