"""The one text model (specmon/text.py): wrap, title and first_fitting, checked for what must hold at
every width, not for a pinned wording."""

import itertools

import pytest
from rich.text import Text

from specmon.text import Part, cut, first_fitting, title, wrap, wrapped_lines

SOCK = "/run/user/1000/specmon/20261206-022954-8be60d.sock"
START = f"specmon: logging to logs/20261206-022954-8be60d.specmon; watch with: specmon attach {SOCK}"
WIDTHS = range(12, 121, 7)


def words(lines) -> list[str]:
    return " ".join(getattr(line, "plain", line) for line in lines).split()


@pytest.mark.parametrize("width", WIDTHS)
def test_wrap_keeps_every_word_in_order_within_the_width_under_the_indent(width):
    lines = wrap(START, width, "  ")
    assert "".join(words(lines)) == "".join(START.split())  # a word no line holds is folded, nothing lost
    whole = [w for w in START.split() if len(w) <= width - 2]  # the words a line holds are never parted
    assert all(w in words(lines) for w in whole), [line.plain for line in lines]
    assert all(len(line) <= width for line in lines), [line.plain for line in lines]
    assert all(line.plain.startswith("  ") and not line.plain.startswith("   ") for line in lines[1:])
    assert all(line.plain == line.plain.rstrip() for line in lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_whole_phrase_that_a_line_holds_is_never_parted(width):
    command = f"specmon attach {SOCK}"
    lines = wrapped_lines(START, width, "  ", whole=[command])
    assert words(lines) == START.split()
    if len(command) <= width - 2:
        assert any(command in line for line in lines), lines
    else:  # no line holds it: it breaks at words as any text
        assert not any(command in line for line in lines)


def test_a_word_longer_than_a_line_is_folded_or_left_whole_on_a_line_of_its_own():
    text = f"log: {SOCK} plots"
    folded = wrapped_lines(text, 20, "  ", fold=True)
    assert all(len(line) <= 20 for line in folded) and "".join(x.strip() for x in folded[1:-1]) == SOCK
    whole = wrapped_lines(text, 20, "  ")
    assert whole == ["log:", f"  {SOCK}", "  plots"]


def test_wrap_keeps_styles_leading_blanks_and_the_first_lines_start_column():
    text = Text("  label   ").append("a styled value that wraps", style="bold")
    lines = wrap(text, 16, " " * 10)
    assert lines[0].plain.startswith("  label") and all(x.plain.startswith(" " * 10) for x in lines[1:])
    for line in lines:
        bold = {i for span in line.spans if span.style == "bold" for i in range(span.start, span.end)}
        value_from = line.plain.index("label") + 5 if "label" in line.plain else 0
        assert {i for i, ch in enumerate(line.plain) if ch != " " and i >= value_from} <= bold, line.plain
    prefixed = wrap("a notice that goes on past one line", 20, start=9)
    assert len(prefixed[0]) <= 11 and all(len(x) <= 20 for x in prefixed)
    assert [x.plain for x in wrap("   ", 10)] == [""] == [x.plain for x in wrap("", 10)]  # a blank line is a line


def test_tabs_and_newlines_in_a_name_wrap_as_blanks():
    assert wrapped_lines("a\tb\nc", 80) == ["a b c"]


PARTS = [
    Part("lead", ["⏸ 10×"], "bold"),
    Part("name", ["proxy: http://127.0.0.1:9000 -> http://gpu-box:8080", "proxy -> gpu-box:8080"], "bold"),
    Part("kind", ["ngram", ""]),
    Part("state", ["up, seen since 12:03:04", "up"], "green"),
]
STEPS = ("name", "state", "kind")


@pytest.mark.parametrize("width", range(1, 100))
def test_a_title_fits_its_width_gives_way_in_its_order_and_marks_every_cut(width):
    plain = title(PARTS, STEPS, width, cut_part="name").plain
    assert len(plain) <= width
    whole = " · ".join(p.wordings[0] for p in PARTS)
    if len(whole) <= width:
        assert plain == whole  # nothing gives way where all fits
    wordings = {" · ".join(w for w in combo if w) for combo in itertools.product(*(p.wordings for p in PARTS))}
    assert plain in wordings or "…" in plain  # a line no wording makes was cut, and says so
    if "up, seen since" in plain and plain != whole:  # the name gives way first
        assert "proxy -> gpu-box:8080" in plain


def test_a_title_without_a_width_is_whole_and_keeps_each_parts_style():
    line = title(PARTS, STEPS, None)
    assert line.plain == " · ".join(p.wordings[0] for p in PARTS)
    assert {span.style for span in line.spans} >= {"bold", "green"}


@pytest.mark.parametrize("width", range(0, 30))
def test_first_fitting_takes_the_longest_that_fits_else_cuts_the_last(width):
    chosen = first_fitting(width, "speed · chat k=4 (off)", "speed · k=4", "speed k=4")
    assert len(chosen) <= max(width, 1)
    if width >= len("speed k=4"):
        assert "…" not in chosen and chosen in ("speed · chat k=4 (off)", "speed · k=4", "speed k=4")
        assert width < len("speed · k=4") or chosen != "speed k=4"
    else:
        assert chosen == cut("speed k=4", width) and chosen.endswith("…")


@pytest.mark.parametrize("width", range(4, 30))
def test_wide_characters_are_measured_in_columns(width):
    """A class named in Japanese takes two columns a character: lines, titles and cuts count columns."""
    from rich.cells import cell_len

    name = "日本語のクラス名 は とても 長い です"
    lines = wrapped_lines(name, width, fold=True)
    assert all(cell_len(line) <= width for line in lines), lines
    assert "".join("".join(lines).split()) == "".join(name.split())
    assert cell_len(cut(name, width)) <= width
    assert cell_len(title([Part("name", [name])], (), width, cut_part="name").plain) <= width


def test_what_textwrap_did_at_the_edges_holds():
    """The cases a review of the move off textwrap found: a line's own leading blanks go before its first
    word is split; a first word that the first line (after a prefix) cannot hold starts the next; a no-break
    space holds."""
    assert wrapped_lines("  abcdefghijkl mn", 13, "    ", fold=True) == ["abcdefghijkl", "    mn"]
    assert [x.plain for x in wrap("abcdefgh ij", 12, start=9, fold=False)] == ["", "  abcdefgh", "  ij"]
    assert wrapped_lines("abc\xa0def ghi", 5) == ["abc\xa0def", "  ghi"]
