"""Terraform expressions as text -> a small syntax tree, for ``deploy.evaluate``.

python-hcl2 parses the file structure (blocks, arguments, literal maps and
lists) but hands expressions back as text such as ``"${merge(local.a, {B = 1})}"``.
This reads that text: a tokenizer and a recursive-descent parser for the part
of the language ``terraform/`` uses. A node is a tuple ``(kind, source text, *parts)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class EvalError(ValueError):
    """An expression this reader or evaluator does not understand; the message quotes it."""


_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
  | (?P<op>\.\.\.|=>|==|!=|<=|>=|&&|\|\||[()\[\]{},.?:!=<>+\-*/%])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # number, ident, op, string, end
    text: str
    start: int


def _scan_string(text: str, start: int) -> int:
    """Index just past the string literal (a template, possibly with nested ``${}``) opening at ``start``."""
    i = start + 1
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == '"':
            return i + 1
        if text.startswith("${", i) or text.startswith("%{", i):
            i = scan_braces(text, i + 1)
            continue
        i += 1
    raise EvalError(f"unterminated string in {text!r}")


def scan_braces(text: str, start: int) -> int:
    """Index just past the ``}`` matching the ``{`` at ``start``, skipping strings inside."""
    depth = 0
    i = start
    while i < len(text):
        char = text[i]
        if char == '"':
            i = _scan_string(text, i)
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise EvalError(f"unbalanced braces in {text!r}")


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        if text[i] == '"':
            end = _scan_string(text, i)
            tokens.append(Token("string", text[i:end], i))
            i = end
            continue
        match = _TOKEN.match(text, i)
        if match is None:
            raise EvalError(f"cannot read {text[i : i + 20]!r} in {text!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(Token(kind, match.group(), i))
        i = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


Node = tuple[Any, ...]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0

    def parse(self) -> Node:
        node = self.expression()
        if self.peek().kind != "end":
            raise EvalError(f"unexpected {self.peek().text!r} in {self.text!r}")
        return node

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def take(self, text: str | None = None) -> Token:
        token = self.peek()
        if text is not None and token.text != text:
            raise EvalError(f"expected {text!r}, found {token.text!r} in {self.text!r}")
        self.pos += 1
        return token

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind in {"op", "ident"}:
            self.pos += 1
            return True
        return False

    def source(self, start: Token) -> str:
        return self.text[start.start : self.peek().start].strip() if self.pos else ""

    def expression(self) -> Node:
        start = self.peek()
        condition = self.binary(0)
        if self.accept("?"):
            then = self.expression()
            self.take(":")
            otherwise = self.expression()
            return ("cond", self.source(start), condition, then, otherwise)
        return condition

    _LEVELS: tuple[tuple[str, ...], ...] = (
        ("||",),
        ("&&",),
        ("==", "!="),
        ("<", ">", "<=", ">="),
        ("+", "-"),
        ("*", "/", "%"),
    )

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        start = self.peek()
        left = self.binary(level + 1)
        while self.peek().kind == "op" and self.peek().text in self._LEVELS[level]:
            op = self.take().text
            right = self.binary(level + 1)
            left = ("binary", self.source(start), op, left, right)
        return left

    def unary(self) -> Node:
        start = self.peek()
        if self.peek().kind == "op" and self.peek().text in {"!", "-"}:
            op = self.take().text
            operand = self.unary()
            return ("unary", self.source(start), op, operand)
        return self.postfix()

    def postfix(self) -> Node:
        start = self.peek()
        node = self.primary()
        while True:
            if self.peek().text == "." and self.peek(1).kind in {"ident", "number"}:
                self.take()
                key: Any = self.take().text
                node = ("attr", self.source(start), node, int(key) if key.isdigit() else key)
            elif self.peek().text == "[" and not (self.peek(1).text == "*" and self.peek(2).text == "]"):
                self.take()
                index = self.expression()
                self.take("]")
                node = ("get", self.source(start), node, index)
            elif self.peek().text in {".", "["}:  # splats: only after apply
                self.take()
                self.take("*")
                if self.peek().text == "]":
                    self.take()
                node = ("unknown", self.source(start))
            else:
                return node

    def primary(self) -> Node:
        start = self.peek()
        token = self.take()
        if token.kind == "number":
            return ("literal", token.text, float(token.text) if "." in token.text else int(token.text))
        if token.kind == "string":
            return ("template", token.text)
        if token.kind == "ident":
            if token.text in {"true", "false"}:
                return ("literal", token.text, token.text == "true")
            if token.text == "null":
                return ("literal", token.text, None)
            if self.peek().text == "(":
                return self.call(token, start)
            return ("name", token.text, token.text)
        if token.text == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if token.text == "[":
            return self.tuple_or_for(start)
        if token.text == "{":
            return self.object_or_for(start)
        raise EvalError(f"unexpected {token.text!r} in {self.text!r}")

    def call(self, name: Token, start: Token) -> Node:
        self.take("(")
        args: list[Node] = []
        spread = False
        while self.peek().text != ")":
            args.append(self.expression())
            if self.accept("..."):
                spread = True
            if not self.accept(","):
                break
        self.take(")")
        return ("call", self.source(start), name.text, args, spread)

    def tuple_or_for(self, start: Token) -> Node:
        if self.peek().text == "for":
            return self.for_expression(start, "]")
        items: list[Node] = []
        while self.peek().text != "]":
            items.append(self.expression())
            if not self.accept(","):
                break
        self.take("]")
        return ("tuple", self.source(start), items)

    def object_or_for(self, start: Token) -> Node:
        if self.peek().text == "for":
            return self.for_expression(start, "}")
        items: list[tuple[Node, Node]] = []
        while self.peek().text != "}":
            key_token = self.peek()
            if key_token.kind == "ident" and self.peek(1).text in {"=", ":"}:
                self.take()
                key: Node = ("literal", key_token.text, key_token.text)
            else:
                key = self.expression()
            if not (self.accept("=") or self.accept(":")):
                raise EvalError(f"expected '=' after an object key in {self.text!r}")
            items.append((key, self.expression()))
            self.accept(",")
        self.take("}")
        return ("object", self.source(start), items)

    def for_expression(self, start: Token, close: str) -> Node:
        self.take("for")
        names = [self.take().text]
        if self.accept(","):
            names.append(self.take().text)
        self.take("in")
        collection = self.expression()
        self.take(":")
        key = None
        value = self.expression()
        if close == "}":
            self.take("=>")
            key, value = value, self.expression()
            self.accept("...")  # grouping mode: not used here, values are then lists
        condition = self.expression() if self.accept("if") else None
        self.take(close)
        return ("for", self.source(start), names, collection, key, value, condition)


def parse_expression(text: str) -> Node:
    return _Parser(text).parse()
