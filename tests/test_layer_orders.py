"""minibert.support.layer_orders: a script's layer indices read, and the depth limit."""

import pytest

from minibert.support.errors import MiniBertError
from minibert.support.layer_orders import MAX_DEPTH, check_depth, parse_indices


def test_parse_indices_reads_comma_separated_ascii_integers_and_names_the_flag():
    assert parse_indices(" 0, 2 ,5", "--order") == [0, 2, 5]
    for text, flag, message in [("", "--order", "--order: empty"),
                                ("1,x", "--duplicate", "--duplicate '1,x'"),
                                ("٢,١", "--order", "--order '٢,١'.*digits 0-9"),
                                ("1,２", "--order", "digits 0-9")]:          # Arabic-Indic digits, a fullwidth 2
        with pytest.raises(MiniBertError, match=message):
            parse_indices(text, flag)


def test_check_depth_allows_the_limit_itself_and_names_what_asked():
    check_depth(MAX_DEPTH, "layer_order")
    with pytest.raises(MiniBertError, match="layer_order: would make a model of 1,001 layers; the limit is 1,000"):
        check_depth(MAX_DEPTH + 1, "layer_order")
