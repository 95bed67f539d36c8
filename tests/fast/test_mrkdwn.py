"""Markdown to Slack mrkdwn, and cutting mrkdwn into messages: pure logic, no network."""

from __future__ import annotations

import random
import re

import pytest

from shared.slack.mrkdwn import to_mrkdwn
from shared.slack.split import DEFAULT_LIMIT, MIN_LIMIT, split_message

# --- Inline formatting ---


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**bold**", "*bold*"),
        ("__bold__", "*bold*"),
        ("*italic*", "_italic_"),
        ("_italic_", "_italic_"),
        ("~~strike~~", "~strike~"),
        ("***both***", "_*both*_"),
        ("*a **b** c*", "_a *b* c_"),
        ("**Note:** read this", "*Note:* read this"),
        ("(**x**) and **x**.", "(*x*) and *x*."),
        ("**unclosed and *half", "**unclosed and *half"),
        ("~single~ tilde", "~single~ tilde"),
    ],
)
def test_emphasis(markdown: str, expected: str) -> None:
    assert to_mrkdwn(markdown) == expected


@pytest.mark.parametrize(
    "text",
    [
        "snake_case_name",
        "call my_function_name() with MAX_RETRIES",
        "2 * 3 * 4 = 24",
        "2*3*4 = 24",
        "a * b",
        "**x**y",
        ":white_check_mark: done",
        "file_name_v2_final.txt",
    ],
)
def test_asterisks_and_underscores_inside_words_or_arithmetic_stay(text: str) -> None:
    assert to_mrkdwn(text) == text


def test_backslash_escapes_give_the_literal_character() -> None:
    assert to_mrkdwn(r"\# not a heading, \[not a link\], a\_b") == "# not a heading, [not a link], a_b"


# --- Links ---


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("[label](https://example.com)", "<https://example.com|label>"),
        ('see [the docs](https://example.com/a "Title")!', "see <https://example.com/a|the docs>!"),
        (
            "[Foo](https://en.wikipedia.org/wiki/Foo_(bar)_baz)",
            "<https://en.wikipedia.org/wiki/Foo_(bar)_baz|Foo>",
        ),
        ("[a_b](https://x.io/snake_case_path/__init__.py)", "<https://x.io/snake_case_path/__init__.py|a_b>"),
        ("[**bold** link](https://x.io)", "<https://x.io|*bold* link>"),
        ("[q](https://x.io/?a=1&b=2|3)", "<https://x.io/?a=1&amp;b=2%7C3|q>"),
        ("[spaces](<https://x.io/a b>)", "<https://x.io/a%20b|spaces>"),
        ("[](https://x.io)", "<https://x.io>"),
        ("![diagram](https://x.io/d.png)", "<https://x.io/d.png|diagram>"),
        ("[relative](/docs/setup) and [anchor](#usage)", "relative (/docs/setup) and anchor"),
        ("[not a link] and [x] (y)", "[not a link] and [x] (y)"),
    ],
)
def test_links(markdown: str, expected: str) -> None:
    assert to_mrkdwn(markdown) == expected


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("see https://example.com/a_b_c/d*e*f", "see https://example.com/a_b_c/d*e*f"),
        ("go to https://example.com.", "go to https://example.com."),
        ("(https://example.com/x_(y))", "(https://example.com/x_(y))"),
        ("**https://example.com**", "*https://example.com*"),
        ("https://example.com/?a=1&b=2", "https://example.com/?a=1&amp;b=2"),
        ("www.snake_case_site.com", "www.snake_case_site.com"),
    ],
)
def test_bare_urls_stay_but_are_protected_from_emphasis(markdown: str, expected: str) -> None:
    assert to_mrkdwn(markdown) == expected


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("<https://example.com/a_b>", "<https://example.com/a_b>"),
        ("<https://example.com|echoed label>", "<https://example.com|echoed label>"),
        ("<mailto:me@example.com>", "<mailto:me@example.com>"),
        ("<me@example.com>", "<mailto:me@example.com|me@example.com>"),
    ],
)
def test_autolinks(markdown: str, expected: str) -> None:
    assert to_mrkdwn(markdown) == expected


@pytest.mark.parametrize(
    "token",
    [
        "<@U123ABC>",
        "<@U123ABC|alice>",
        "<#C123|general>",
        "<#C123>",
        "<!here>",
        "<!channel>",
        "<!everyone>",
        "<!subteam^S123>",
        "<!subteam^S123|@oncall>",
        "<!date^1392734382^{date_short}|Feb 18, 2014>",
    ],
)
def test_slack_tokens_are_kept(token: str) -> None:
    assert to_mrkdwn(f"ping {token} & **now**") == f"ping {token} &amp; *now*"


# --- Escaping ---


def test_control_characters_are_escaped_in_text() -> None:
    assert to_mrkdwn("a < b && c > d") == "a &lt; b &amp;&amp; c &gt; d"
    assert to_mrkdwn("x -> y <not a tag>") == "x -&gt; y &lt;not a tag&gt;"
    assert to_mrkdwn(r"\<escaped\> \&") == "&lt;escaped&gt; &amp;"


def test_entities_the_model_already_wrote_are_not_escaped_twice() -> None:
    assert to_mrkdwn("AT&T &amp; Co &lt;3") == "AT&amp;T &amp; Co &lt;3"


def test_inline_code_is_untouched() -> None:
    markdown = "run `a < b && c > d`, `**not bold**` and `snake_case` but **bold** & more"
    assert to_mrkdwn(markdown) == "run `a < b && c > d`, `**not bold**` and `snake_case` but *bold* &amp; more"


def test_double_backtick_code_span_and_unmatched_backtick() -> None:
    assert to_mrkdwn("``a ` b`` and `lonely") == "``a ` b`` and `lonely"


def test_link_label_brackets_inside_code_do_not_end_the_label() -> None:
    assert to_mrkdwn("[`a]b`](https://x.io)") == "<https://x.io|`a]b`>"


# --- Code blocks ---


def test_fenced_code_keeps_content_byte_for_byte_and_drops_the_language() -> None:
    code = "def f(a_b, *args, **kwargs):\n    return a_b < 2 && x > 1  # **not bold** [x](y) <@U1>\n\n\tdone\n"
    markdown = f"Here:\n```python\n{code}```\nafter **bold**"
    assert to_mrkdwn(markdown) == f"Here:\n```\n{code}```\nafter *bold*"


def test_tilde_fence_longer_fence_and_unclosed_fence() -> None:
    assert to_mrkdwn("~~~\n# not a heading\n~~~") == "```\n# not a heading\n```"
    assert to_mrkdwn("````md\n```\ninner\n```\n````") == "```\n```\ninner\n```\n```"
    assert to_mrkdwn("```\nnever closed & <x>") == "```\nnever closed & <x>\n```"


def test_fence_indented_under_a_list_item() -> None:
    markdown = "1. Install:\n   ```bash\n   pip install x  # a_b\n     indented\n   ```\n2. Done"
    assert to_mrkdwn(markdown) == "1. Install:\n```\npip install x  # a_b\n  indented\n```\n2. Done"


def test_one_line_triple_backtick_span_is_left_alone() -> None:
    assert to_mrkdwn("```x = a_b * 2```") == "```x = a_b * 2```"


# --- Blocks ---


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("# Title", "*Title*"),
        ("###### Deep title", "*Deep title*"),
        ("## **Bold** and _italic_ ##", "*Bold and _italic_*"),
        ("## C# tips", "*C# tips*"),
        ("#hashtag", "#hashtag"),
        ("#", ""),
        ("####### seven", "####### seven"),
    ],
)
def test_headings(markdown: str, expected: str) -> None:
    assert to_mrkdwn(markdown) == expected


def test_bullets_keep_nesting() -> None:
    markdown = "- one\n  - two *it*\n    * three **b**\n+ four\n* _five_"
    assert to_mrkdwn(markdown) == "• one\n  • two _it_\n    • three *b*\n• four\n• _five_"


def test_task_list_items() -> None:
    assert to_mrkdwn("- [ ] todo\n- [x] done\n- [X] also") == "• ☐ todo\n• ☑ done\n• ☑ also"


def test_numbered_lists_stay() -> None:
    assert to_mrkdwn("1. first **b**\n2. second\n   1) nested") == "1. first *b*\n2. second\n   1) nested"


def test_italic_at_line_start_is_not_a_bullet() -> None:
    assert to_mrkdwn("*emphasis* first\n**bold** first") == "_emphasis_ first\n*bold* first"


def test_block_quotes_stay_and_only_their_marker_is_unescaped() -> None:
    assert to_mrkdwn("> quoted **b** > x") == "> quoted *b* &gt; x"
    assert to_mrkdwn(">no space\n>\n> - item") == "> no space\n>\n> • item"
    assert to_mrkdwn(">> nested\n>>> deep") == "> nested\n> deep"


@pytest.mark.parametrize("rule", ["---", "***", "___", "* * *", "- - -", "-----"])
def test_horizontal_rules_become_a_line(rule: str) -> None:
    assert to_mrkdwn(f"above\n\n{rule}\n\nbelow") == "above\n\n———\n\nbelow"


def test_paragraphs_and_line_breaks_are_kept() -> None:
    assert to_mrkdwn("one\ntwo\n\n\nthree\r\nfour") == "one\ntwo\n\n\nthree\nfour"


def test_table_becomes_an_aligned_code_block() -> None:
    markdown = (
        "Results:\n"
        "| Name | Qty | Note |\n"
        "|:-----|----:|:---:|\n"
        "| `a_b` | 1 | **ok** |\n"
        "| long name | 100 | x \\| y |\n"
        "\n"
        "End"
    )
    assert to_mrkdwn(markdown) == (
        "Results:\n"
        "```\n"
        "| Name      | Qty | Note  |\n"
        "|-----------|-----|-------|\n"
        "| a_b       |   1 |  ok   |\n"
        "| long name | 100 | x | y |\n"
        "```\n"
        "\n"
        "End"
    )


def test_table_rows_are_padded_or_trimmed_to_the_header() -> None:
    markdown = "a | b\n--|--\n1 |\n1 | 2 | 3\nno pipe"
    assert to_mrkdwn(markdown) == "```\n| a   | b   |\n|-----|-----|\n| 1   |     |\n| 1   | 2   |\n```\nno pipe"


def test_table_links_and_wide_characters() -> None:
    markdown = "| k | v |\n|---|---|\n| 日本 | [doc](https://x.io) |"
    assert to_mrkdwn(markdown) == (
        "```\n| k    | v                  |\n|------|--------------------|\n| 日本 | doc (https://x.io) |\n```"
    )


def test_pipes_without_a_delimiter_row_are_text() -> None:
    assert to_mrkdwn("a | b\nc | d") == "a | b\nc | d"
    assert to_mrkdwn("text\n---") == "text\n———"


def test_a_realistic_answer() -> None:
    markdown = (
        "## Summary\n"
        "I checked `config_loader.py` for <@U42ABC>. The **root cause** is that `MAX_RETRIES` is 0 & the "
        "retry loop (see [the docs](https://example.com/retry_(policy))) never runs.\n"
        "\n"
        "* Fix: set it to 3\n"
        "  * or use *exponential* backoff\n"
        "\n"
        "```python\n"
        "MAX_RETRIES = 3  # was 0 & <none>\n"
        "```\n"
    )
    assert to_mrkdwn(markdown) == (
        "*Summary*\n"
        "I checked `config_loader.py` for <@U42ABC>. The *root cause* is that `MAX_RETRIES` is 0 &amp; the "
        "retry loop (see <https://example.com/retry_(policy)|the docs>) never runs.\n"
        "\n"
        "• Fix: set it to 3\n"
        "  • or use _exponential_ backoff\n"
        "\n"
        "```\n"
        "MAX_RETRIES = 3  # was 0 & <none>\n"
        "```\n"
    )


def test_empty_input() -> None:
    assert to_mrkdwn("") == ""
    assert split_message("") == []
    assert split_message(" \n\n ") == []


# --- Splitting ---


def _content(text: str) -> str:
    """What must survive splitting: everything but fences and whitespace."""
    return re.sub(r"\s", "", text.replace("```", ""))


def test_short_text_is_one_chunk() -> None:
    assert split_message("hello *world*") == ["hello *world*"]
    assert split_message("\n\n  indented\n\n") == ["  indented"]


def test_limit_must_leave_room_for_fences() -> None:
    assert DEFAULT_LIMIT == 3500
    with pytest.raises(ValueError, match="at least"):
        split_message("text", limit=MIN_LIMIT - 1)
    assert split_message("text", limit=MIN_LIMIT) == ["text"]


def test_paragraphs_are_kept_whole() -> None:
    paragraphs = [f"Paragraph {i:02d}. " + " ".join(f"w{i:02d}x{j:02d}" for j in range(20)) for i in range(12)]
    chunks = split_message("\n\n".join(paragraphs), limit=400)
    assert all(len(chunk) <= 400 for chunk in chunks)
    assert [p for chunk in chunks for p in chunk.split("\n\n")] == paragraphs
    assert len(paragraphs[0]) == 153
    assert [chunk.count("\n\n") for chunk in chunks] == [1, 1, 1, 1, 1, 1]  # two paragraphs fit in 400, three don't


def test_paragraph_break_is_preferred_to_a_later_line_break() -> None:
    text = "a" * 40 + "\n\n" + "\n".join(["b" * 30] * 5)
    assert split_message(text, limit=120) == ["a" * 40, "\n".join(["b" * 30] * 3), "\n".join(["b" * 30] * 2)]


def test_line_break_is_preferred_to_a_space() -> None:
    text = "first line\n" + " ".join(["word"] * 40)
    chunks = split_message(text, limit=100)
    assert chunks[0] == "first line"
    assert all(len(chunk) <= 100 for chunk in chunks)


def test_spaces_are_used_inside_a_long_line() -> None:
    words = [f"word{i}" for i in range(100)]
    chunks = split_message(" ".join(words), limit=100)
    assert all(len(chunk) <= 100 for chunk in chunks)
    assert [w for chunk in chunks for w in chunk.split(" ")] == words


def test_a_single_huge_word_is_cut_as_a_last_resort() -> None:
    word = "x" * 1050
    chunks = split_message(f"start {word} end", limit=200)
    assert chunks[0] == "start"
    assert all(0 < len(chunk) <= 200 for chunk in chunks)
    assert "".join(chunks[1:-1]) + chunks[-1].removesuffix(" end") == word
    assert chunks[-1].endswith(" end")


def test_entities_and_emoji_sequences_are_not_cut() -> None:
    text = "&amp;" * 100
    chunks = split_message(text, limit=103)
    assert all(chunk.startswith("&amp;") and chunk.endswith("&amp;") for chunk in chunks)
    assert "".join(chunks) == text
    family = "👨\u200d👩\u200d👧"
    chunks = split_message(family * 40, limit=100)
    assert all(chunk.startswith("👨") and chunk.endswith("👧") for chunk in chunks)


def test_long_code_block_is_closed_and_reopened_in_every_chunk() -> None:
    code_lines = [f"    value_{i} = compute(a < {i}, b & c)  # line {i}" for i in range(120)]
    text = "Intro *text*\n```\n" + "\n".join(code_lines) + "\n```\nOutro"
    chunks = split_message(text, limit=500)
    assert len(chunks) > 5
    assert chunks[0].startswith("Intro *text*\n```\n    value_0 =")
    for chunk in chunks:
        assert len(chunk) <= 500
        assert chunk.count("```") == 2
    for chunk in chunks[1:]:
        assert chunk.startswith("```\n    value_")
    for chunk in chunks[:-1]:
        assert chunk.endswith("\n```")
    assert chunks[-1].endswith("\n```\nOutro")
    lines = [line for chunk in chunks for line in chunk.split("\n")]
    body = [line for line in lines if line not in ("```", "Outro", "Intro *text*")]
    assert body == code_lines  # indentation and the unescaped "<" and "&" survive


def test_a_cut_never_leaves_an_empty_code_block() -> None:
    text = "p " * 30 + "\n```\n" + "c" * 60 + "\n```\n" + "q " * 30
    for limit in range(100, 200):
        for chunk in split_message(text, limit=limit):
            assert len(chunk) <= limit
            assert "```\n```" not in chunk
            assert not chunk.endswith("```") or chunk.count("```") % 2 == 0


def test_a_long_code_line_is_cut_with_fences_too() -> None:
    text = "```\n" + "y" * 450 + "\n```"
    chunks = split_message(text, limit=100)
    assert all(len(c) <= 100 and c.startswith("```\n") and c.endswith("\n```") for c in chunks)
    assert _content("".join(chunks)) == "y" * 450


def test_links_are_never_cut() -> None:
    links = [f"<https://example.com/page_{i}?a=1&amp;b={i}|label with spaces {i}>" for i in range(60)]
    text = "Links: " + " ".join(links)
    chunks = split_message(text, limit=150)
    assert all(len(chunk) <= 150 for chunk in chunks)
    found = [token for chunk in chunks for token in re.findall(r"<[^<>]*>", chunk)]
    assert found == links
    for chunk in chunks:
        assert chunk.count("<") == chunk.count(">")


def test_a_token_longer_than_the_limit_is_cut_rather_than_exceed_it() -> None:
    token = f"<https://example.com/{'a' * 300}|label>"
    chunks = split_message(f"before {token} after", limit=100)
    assert chunks[0] == "before"
    assert all(len(chunk) <= 100 for chunk in chunks)
    assert "".join(chunks[1:-1]) + chunks[-1].removesuffix(" after") == token


def test_whitespace_that_would_fill_a_chunk_is_trimmed() -> None:
    assert split_message("```\na\n" + " " * 500 + "code\n```", limit=100) == ["```\na\n```", "```\ncode\n```"]


@pytest.mark.parametrize(
    "line",
    ["[" * 5000, "[a](" * 3000, "a* " * 5000, "*a **b " * 3000, "` `` " * 2000, "<" * 5000, '[a](x "' * 3000],
)
def test_pathological_lines_convert_in_reasonable_time(line: str) -> None:
    converted = to_mrkdwn(line)  # quadratic parsing would take minutes here
    assert _content(converted.replace("&lt;", "<")) == _content(line)


def test_markdown_is_split_as_it_is_for_the_answers_markdown_blocks() -> None:
    markdown = "\n\n".join(f"## Part {i}\n**Bold** text with a [link](https://x.io/{i}) & more." for i in range(50))
    parts = split_message(markdown, limit=300)
    assert all(len(m) <= 300 for m in parts)
    assert parts[0].startswith("## Part 0\n**Bold** text with a [link](https://x.io/0) & more.")
    assert "\n\n".join(parts) == markdown
    code = "```python\n" + "\n".join(f"print({i})" for i in range(60)) + "\n```"
    first, *rest = split_message(code, limit=200)
    assert first.startswith("```python\n")
    assert first.endswith("\n```")  # closed where it is cut
    assert all(part.startswith("```\n") and part.endswith("```") for part in rest)  # and reopened


_WORDS = ["alpha", "snake_case", "2 * 3", "&", "a<b", "**bold**", "_it_", "x" * 90, "日本語", "👍", "~~s~~", "`c<d`"]


def _random_markdown(rng: random.Random) -> str:
    def words(count: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(count))

    blocks = []
    for _ in range(rng.randint(1, 25)):
        kind = rng.random()
        if kind < 0.4:
            blocks.append(words(rng.randint(1, 80)))
        elif kind < 0.55:
            lines = [" " * rng.choice([0, 2, 4]) + "- " + words(rng.randint(1, 10)) for _ in range(rng.randint(1, 8))]
            blocks.append("\n".join(lines))
        elif kind < 0.75:
            lines = [" " * rng.randint(0, 6) + words(rng.randint(0, 15)) for _ in range(rng.randint(1, 60))]
            blocks.append("```py\n" + "\n".join(lines) + "\n```")
        elif kind < 0.9:
            labels = [" ".join(rng.choices(_WORDS[:7], k=rng.randint(1, 4))) for _ in range(4)]
            links = [f"[{label}](https://ex.com/{rng.randint(0, 9**9)}_(x))" for label in labels]
            blocks.append(" ".join([*links, "<@U123ABC>", "<!subteam^S1|@team>"]))
        else:
            blocks.append("| a | b |\n|---|---|\n" + "\n".join(f"| {words(2)} | {words(3)} |" for _ in range(5)))
    return "\n\n".join(blocks)


@pytest.mark.parametrize("converted", [True, False], ids=["mrkdwn", "markdown"])
@pytest.mark.parametrize("seed", range(40))
def test_random_documents_split_within_the_limit_without_losing_content(seed: int, converted: bool) -> None:
    rng = random.Random(seed)
    mrkdwn = to_mrkdwn(_random_markdown(rng)) if converted else _random_markdown(rng)
    tokens = re.findall(r"<[^<>\n]*>", re.sub(r"```.*?```", "", mrkdwn, flags=re.DOTALL))
    for limit in (MIN_LIMIT, rng.randint(MIN_LIMIT, 600), rng.randint(600, 4000)):
        chunks = split_message(mrkdwn, limit=limit)
        assert chunks
        for chunk in chunks:
            assert 0 < len(chunk) <= limit
            assert chunk.strip()
            assert chunk.count("```") % 2 == 0, chunk
        assert _content("".join(chunks)) == _content(mrkdwn)
        outside_code = re.sub(r"```.*?```", "", "\n".join(chunks), flags=re.DOTALL)
        assert re.findall(r"<[^<>\n]*>", outside_code) == tokens
