"""Billed cost arithmetic and the price table from config."""

from __future__ import annotations

import pytest

from progressive_compactor import ConfigError, load_config
from progressive_compactor.pricing import DEFAULT_PRICES, Cost, PriceTable, call_cost, prices_from_mapping

PRICES = PriceTable(input=3.0, cached_input=0.3, output=15.0, summarizer_input=1.0, summarizer_output=5.0)


def test_call_cost_splits_fresh_cached_output_and_summarizer():
    cost = call_cost(
        PRICES,
        view_tokens=1_000_000,
        cached_tokens=400_000,
        output_tokens=10_000,
        summarizer_tokens_in=200_000,
        summarizer_tokens_out=20_000,
    )
    assert cost.input == pytest.approx(600_000 * 3.0 / 1e6)  # 1.80
    assert cost.cached_input == pytest.approx(400_000 * 0.3 / 1e6)  # 0.12
    assert cost.output == pytest.approx(10_000 * 15.0 / 1e6)  # 0.15
    assert cost.summarizer == pytest.approx(200_000 * 1.0 / 1e6 + 20_000 * 5.0 / 1e6)  # 0.30
    assert cost.total == pytest.approx(2.37)


def test_cached_tokens_cannot_exceed_the_view():
    assert call_cost(PRICES, view_tokens=100, cached_tokens=500) == call_cost(
        PRICES, view_tokens=100, cached_tokens=100
    )


def test_cache_write_price_applies_to_the_uncached_part():
    table = PriceTable(input=3.0, cached_input=0.3, cache_write=3.75)
    cost = call_cost(table, view_tokens=2_000_000, cached_tokens=1_000_000)
    assert cost.input == pytest.approx(3.75)
    assert cost.cached_input == pytest.approx(0.3)


def test_negative_counts_are_rejected():
    with pytest.raises(ValueError):
        call_cost(PRICES, view_tokens=-1)


def test_costs_add_up_by_part():
    total = Cost(1, 2, 3, 4) + Cost(0.5, 0.5, 0.5, 0.5)
    assert (total.input, total.cached_input, total.output, total.summarizer, total.total) == (1.5, 2.5, 3.5, 4.5, 12.0)


def test_price_table_from_config_section_and_defaults():
    assert load_config("default").pricing == DEFAULT_PRICES
    table = load_config("default", pricing={"input": 1.25, "summarizer_output": 0.6}).pricing
    assert isinstance(table, PriceTable)
    assert (table.input, table.cached_input, table.summarizer_output) == (1.25, DEFAULT_PRICES.cached_input, 0.6)


def test_price_table_problems_name_their_path():
    with pytest.raises(ConfigError) as bad_key:
        prices_from_mapping({"inptu": 1.0})
    (problem,) = bad_key.value.problems
    assert problem.startswith("unknown setting 'inptu'; did you mean 'input'?") and problem.endswith("@ $.pricing")
    with pytest.raises(ConfigError) as negative:
        prices_from_mapping({"output": -2.0})
    assert negative.value.problems == [
        "a price must be a finite number, 0 or more (US dollars per million tokens), got -2.0 @ $.pricing.output"
    ]
    with pytest.raises(ConfigError) as in_config:
        load_config("default", pricing={"cached_input": -0.3})
    assert in_config.value.problems == [
        "a price must be a finite number, 0 or more (US dollars per million tokens), got -0.3 @ $.pricing.cached_input"
    ]
    with pytest.raises(ConfigError) as text:
        load_config("default", pricing={"input": "cheap"})
    assert [p.rsplit(" @ ", 1)[1] for p in text.value.problems] == ["$.pricing.input"]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_price_must_be_a_finite_number(value):
    with pytest.raises(ConfigError) as raised:
        prices_from_mapping({"input": value})
    assert raised.value.problems == [
        f"a price must be a finite number, 0 or more (US dollars per million tokens), got {value} @ $.pricing.input"
    ]


def test_an_infinite_price_in_yaml_is_refused(tmp_path):
    path = tmp_path / "inf.yaml"
    path.write_text("pricing: {input: .inf}\n", "utf-8")
    with pytest.raises(ConfigError, match=r"a price must be a finite number.*got inf @ \$\.pricing\.input"):
        load_config(path)
