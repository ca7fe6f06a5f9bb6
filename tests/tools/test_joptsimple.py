"""The ``--help`` layout of the Kafka-style tools (:mod:`kcore.commands._joptsimple`).

Every expected text here was printed by joptsimple 5.0.4 itself (``OptionParser.printHelpOn``
with the same options declared in Java) and Java 17's line ``BreakIterator``; the trailing
spaces joptsimple prints are checked as the width every line is padded to.
"""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.commands import acls, cluster_mirrors, dump_log
from kcore.commands._joptsimple import Option, help_table, help_text, line_words


def _lines(text: str) -> list[str]:
    """``text``'s lines without their trailing spaces, after checking they are all padded to
    the same width, as joptsimple pads them (a line may be longer only when one word is)."""
    lines = text.splitlines()
    width = len(lines[0])
    assert all(len(line) == width or len(line.rstrip()) == len(line) > width for line in lines)
    return [line.rstrip() for line in lines]


def test_help_text_sorts_wraps_and_pads_as_joptsimple():
    text = help_text(
        "Purpose.",
        [
            Option("zeta", "Last."),
            Option(
                "alpha",
                "A description long enough to wrap onto a second line, and a third one too: "
                "it goes on.",
                "x",
                default="5",
            ),
            Option("count", "How many.", "", "Integer", optional=True, default="3"),
        ],
    )
    assert text.startswith("Purpose.\n")
    # The description column may be as wide as the rest of the 80 columns (59), not only 39:
    # here its widest wrapped line, 57.
    assert len(text.splitlines()[1]) == 19 + 2 + 57
    assert _lines(text.split("\n", 1)[1]) == [
        "Option               Description",
        "------               -----------",
        "--alpha <String: x>  A description long enough to wrap onto a second line, and",
        "                       a third one too: it goes on. (default: 5)",
        "--count [Integer]    How many. (default: 3)",
        "--help               Print usage information.",
        "--version            Display Kafka version.",
        "--zeta               Last.",
    ]


def test_widths_are_measured_again_on_the_wrapped_lines():
    # Both option cells are wider than 39: wrapped at 39, the widest line is 39 here ("  not-
    # fit-in-the-column <String: value>"), so the description starts after 41 characters;
    # with the cluster-mirrors options (widest wrapped line 38) it starts after 40.
    rows = [
        ("Option", "Description"),
        ("------", "-----------"),
        (
            "--a-very-long-option-name-that-will-not-fit-in-the-column <String: value>",
            "See https://kafka.apache.org/documentation/#brokerconfigs_log.retention.ms for it.",
        ),
        (
            "--operation <String>",
            "Operation that is being allowed or denied. Valid operation names are: (default: All)",
        ),
    ]
    assert _lines(help_table(rows)) == [
        "Option                                   Description",
        "------                                   -----------",
        "--a-very-long-option-name-that-will-     See https://kafka.apache.",
        "  not-fit-in-the-column <String: value>    org/documentation/#brokerconfigs_log.",
        "                                           retention.ms for it.",
        "--operation <String>                     Operation that is being allowed or",
        "                                           denied. Valid operation names are:",
        "                                           (default: All)",
    ]
    assert cluster_mirrors.HELP.splitlines()[1] == "Option" + " " * 34 + "Description"


def test_a_word_wider_than_its_column_stays_whole():
    rows = [
        ("Option", "Description"),
        ("------", "-----------"),
        (
            "--a-very-long-option-name-that-will-not-fit-in-the-column",
            "Averyveryverylongwordwithoutanybreakinginsideit42 and more",
        ),
    ]
    text = help_table(rows)
    assert _lines(text) == [
        "Option                                Description",
        "------                                -----------",
        "--a-very-long-option-name-that-will-",  # the description's first line is empty
        "  not-fit-in-the-column                 Averyveryverylongwordwithoutanybreakinginsideit42",
        "                                        and more",
    ]
    assert text.splitlines()[3].endswith("inside" + "it42")  # longer than the padded width


def test_help_without_padding_is_the_proposals_cluster_mirrors_text():
    assert not any(line.endswith(" ") for line in cluster_mirrors.HELP.splitlines())
    padded = help_text(cluster_mirrors.USAGE, cluster_mirrors.OPTIONS)
    assert [line.rstrip() for line in padded.splitlines()] == cluster_mirrors.HELP.splitlines()
    assert padded != cluster_mirrors.HELP


def test_line_words_break_where_java_breaks():
    text = (
        "Comma-separated list (e.g., 'my-topic,orders-.*,payments'); k1=v1,k2=[v1,v2] "
        '--from-beginning -1 1.5 x-1 a.b it\'s "quoted" 50% (RLMM) foo().'
    )
    assert line_words(text) == [
        "Comma-", "separated ", "list ", "(e.", "g., ", "'my-", "topic,", "orders-", ".",
        "*,", "payments'); ", "k1=v1,", "k2=", "[v1,", "v2] ", "--", "from-", "beginning ",
        "-1 ", "1.5 ", "x-", "1 ", "a.", "b ", "it's ", '"quoted" ', "50% ", "(RLMM) ",
        "foo().",
    ]  # fmt: skip
    assert line_words("a--b c-d") == ["a--", "b ", "c-", "d"]
    assert line_words("'--;") == ["'--;"] and line_words("x'--;") == ["x'--", ";"]


@given(st.text(st.sampled_from("ab1 -.,'\"()[]$:;/=\t"), max_size=60))
def test_line_words_cut_the_whole_line(line):
    words = line_words(line)
    assert "".join(words) == line
    assert all(words)


@given(st.lists(st.text(st.sampled_from("abcdefgh  "), min_size=1, max_size=90), max_size=4))
def test_cells_keep_their_words_within_the_columns(descriptions):
    rows = [("Option", "Description"), ("------", "-----------")]
    rows += [(f"--o{i}", d) for i, d in enumerate(descriptions)]
    lines = help_table(rows, pad=False).splitlines()
    left = max(len(o) for o, _ in rows)
    right = min(80 - left - 2, max(len(d) for _, d in rows))
    cells = [line[left + 2 :] for line in lines[2:]]
    assert all(line[left : left + 2] == "  " for line in lines if len(line) > left)
    assert all(len(c) <= right or len(c.split()) == 1 for c in cells)
    assert " ".join(cells).split() == " ".join(descriptions).split()


def test_the_kafka_tools_pad_and_the_options_parse_as_declared():
    header = dump_log.HELP.splitlines()[1]
    assert len(header) == 80 and header.rstrip() == "Option".ljust(37) + "Description"
    assert all(line.endswith(" ") for line in acls.HELP.splitlines()[1:3])
    parser = argparse.ArgumentParser(prog="kcore dump-log", add_help=False)
    dump_log.add_arguments(parser)
    args = parser.parse_args(["--files", "a.log", "--key-decoder-class", "--max-bytes", "9"])
    assert args.key_decoder_class == dump_log.STRING_DECODERS[0]  # the default, as valueOf
    assert (args.max_bytes, args.max_message_size, args.value_decoder_class) == (9, None, None)
    parser = argparse.ArgumentParser(prog="kcore cluster-mirrors", add_help=False)
    cluster_mirrors.add_arguments(parser)
    assert parser.parse_args(["--stop", "--wait-for-sync"]).wait_for_sync == 300_000
    assert parser.parse_args(["--wait-for-sync", "5"]).wait_for_sync == 5


def test_a_value_that_is_not_a_number_is_one_line(capsys):
    parser = argparse.ArgumentParser(prog="kcore dump-log", add_help=False)
    dump_log.add_arguments(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--max-bytes", "lots"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "kcore dump-log: argument --max-bytes: invalid int value: 'lots' "
        "(see kcore dump-log --help)\n"
    )
