#!/usr/bin/env python3
"""check_docs.py - the documentation's links hold and README stays an entry page.

    check_docs.py SRCROOT               check the tree
    check_docs.py --self-test SRCROOT   check that the check finds what it must (a made-up tree)

Checks README.md, docs/*.md, examples/README.md and tests/fixtures/README.md:
- every relative link `[text](path)`, `[text](path#anchor)`, `[text](#anchor)` and reference
  definition `[name]: path` names a file or folder of the tree, and its #anchor a heading of the
  Markdown file it points to (the anchor GitHub makes: lowercase, punctuation dropped, spaces
  to '-', '-1', '-2', ... for repeats); links with a scheme (https:, mailto:) are not followed,
  and neither are links inside code (fenced blocks and `code spans`);
- a section named in quotes after a Markdown file's name, as in `docs/io.md` ("Exports") or
  README's "Performance", is a heading of that file: its anchor, or the start of one (so
  "Modules" names `## Modules (include/tgrad_nn.h)`);
- README.md has fewer than README_MAX_LINES lines: it is the entry, the reference lives in docs/.

Each problem is one line `check_docs: FILE:LINE: ...`; the exit status is 1 if there is any.
"""
import os
import re
import shutil
import sys
import tempfile

README_MAX_LINES = 320

LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]*(?:\([^()\s]*\)[^()\s>]*)*)>?(?:\s+"[^"]*")?\s*\)')
REFDEF = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$')
SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')
HEADING = re.compile(r'^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$')
HTML_ID = re.compile(r'<a\s+(?:name|id)="([^"]+)"', re.I)
FENCE = re.compile(r'^\s{0,3}(```+|~~~+)')
# a file's name, then its sections in quotes: `docs/io.md` ("Exports", "Tokenizers"),
# docs/cli.md, "`tgrad run`"; README's "Performance"
QUOTED = re.compile(r'(?<![\w/.-])`?(README(?:\.md)?|docs/[\w-]+\.md)`?(?:\'s)?,?\s*\(?'
                    r'((?:"[^"\n]+"(?:,\s*|\s+and\s+)?)+)')


def prose_lines(text, spans=False):
    """(line number, line) for the lines outside fenced code blocks, code spans blanked unless
    spans is true."""
    fence = None
    for no, line in enumerate(text.split('\n'), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield no, line if spans else re.sub(r'(`+)(.+?)\1', lambda c: ' ' * len(c.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)   # a link counts as its text
    text = re.sub(r'<[^>]+>', '', text).lower()
    text = ''.join(ch for ch in text if ch.isalnum() or ch in ' -_')
    return text.replace(' ', '-')


_anchors = {}


def anchors(path):
    """Every anchor of a Markdown file: its headings' slugs (repeats numbered) and HTML ids."""
    if path not in _anchors:
        seen = {}
        found = set()
        fence = None
        with open(path, encoding='utf-8') as f:
            for line in f.read().split('\n'):
                m = FENCE.match(line)
                if fence:
                    if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                        fence = None
                    continue
                if m:
                    fence = m.group(1)
                    continue
                found.update(HTML_ID.findall(line))
                h = HEADING.match(line)
                if h:
                    s = slug(h.group(2))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    found.add(s if n == 0 else '%s-%d' % (s, n))
        _anchors[path] = found
    return _anchors[path]


def check_file(root, rel, problems):
    path = os.path.join(root, rel)
    with open(path, encoding='utf-8') as f:
        text = f.read()
    check_quoted(root, rel, text, problems)
    lines = dict(prose_lines(text))
    prose = [lines.get(no, '') for no in range(1, text.count('\n') + 2)]
    found = []   # (line number, target): a link's text may wrap over lines, its target not
    joined = '\n'.join(prose)
    for m in LINK.finditer(joined):
        found.append((joined.count('\n', 0, m.start()) + 1, m.group(1)))
    for no, line in enumerate(prose, 1):
        m = REFDEF.match(line)
        if m:
            found.append((no, m.group(1)))
    for no, target in sorted(found):
        if not target or SCHEME.match(target):
            continue
        where, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(path), where)) if where else path
        real, top = os.path.realpath(dest), os.path.realpath(root)
        if real != top and not real.startswith(top + os.sep):
            problems.append('%s:%d: link %r leaves the source tree' % (rel, no, target))
            continue
        if not os.path.exists(dest):
            problems.append('%s:%d: link %r: no file %s' %
                            (rel, no, target, os.path.relpath(dest, root)))
            continue
        if anchor:
            if not dest.endswith('.md') or os.path.isdir(dest):
                problems.append('%s:%d: link %r: an anchor into a file that is not Markdown' %
                                (rel, no, target))
            elif anchor not in anchors(dest):
                problems.append('%s:%d: link %r: %s has no heading with anchor #%s' %
                                (rel, no, target, os.path.relpath(dest, root), anchor))


def check_quoted(root, rel, text, problems):
    """Sections named in quotes after a file's name are headings of that file."""
    lines = dict(prose_lines(text, spans=True))
    prose = '\n'.join(lines.get(no, '') for no in range(1, text.count('\n') + 2))
    for m in QUOTED.finditer(prose):
        name = m.group(1)
        dest = os.path.join(root, 'README.md' if name.startswith('README') else name)
        no = prose.count('\n', 0, m.start()) + 1
        if not os.path.exists(dest):
            problems.append('%s:%d: %s is named but there is no such file' % (rel, no, name))
            continue
        for section in re.findall(r'"([^"]+)"', m.group(2)):
            want = slug(section)
            if not any(a.startswith(want) for a in anchors(dest)):
                problems.append('%s:%d: %s has no section "%s"' %
                                (rel, no, os.path.relpath(dest, root), section))


def check(root):
    problems = []
    files = ['README.md']
    docs = os.path.join(root, 'docs')
    if os.path.isdir(docs):
        files += sorted('docs/' + n for n in os.listdir(docs) if n.endswith('.md'))
    files += [f for f in ('examples/README.md', 'tests/fixtures/README.md')
              if os.path.exists(os.path.join(root, f))]
    for rel in files:
        check_file(root, rel, problems)
    with open(os.path.join(root, 'README.md'), encoding='utf-8') as f:
        n = len(f.read().splitlines())
    if n >= README_MAX_LINES:
        problems.append('README.md: %d lines, the entry page must stay under %d (the reference '
                        'belongs in docs/)' % (n, README_MAX_LINES))
    return problems


def self_test():
    """A made-up tree with one problem of each kind, and a clean one."""
    tmp = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(tmp, 'docs'))
        with open(os.path.join(tmp, 'docs', 'a.md'), 'w') as f:
            f.write('# A page\n\n## The `tgrad run` command (`x_y.h`)\n\n## Twice\n\n## Twice\n\n'
                    '```\n## not a heading\n```\n\n'
                    'Back to [README](../README.md#entry), [here](#twice-1), [up](..).\n')
        good = ('# Entry\n\nSee [a](docs/a.md), [run](docs/a.md#the-tgrad-run-command-x_yh), '
                '[twice](docs/a.md#twice), [web](https://example.org/x#y), '
                '`[code](docs/missing.md)` and [self](#entry).\n\n'
                '```\n[fenced](docs/missing.md)\n```\n\n[ref]: docs/a.md#twice-1\n\n'
                '`docs/a.md` ("Twice", "The `tgrad run`\ncommand"), README\'s "Entry", [a\nwrapped link](#entry).\n')
        with open(os.path.join(tmp, 'README.md'), 'w') as f:
            f.write(good)
        ok = check(tmp)
        if ok:
            print('check_docs: self-test: a clean tree was reported:\n  ' + '\n  '.join(ok))
            return 1
        bad = (good + '\n[gone](docs/gone.md), [anchor](docs/a.md#not-there), '
               '[bad self](#nowhere), [outside](../../etc/passwd)\n\n[ref2]: docs/a.md#not-a-ref\n'
               '[a link that\nwraps](docs/a.md#wrapped-away)\n'
               '(docs/a.md, "Gone section") and docs/b.md ("Any")\n'
               + 'line\n' * README_MAX_LINES)
        with open(os.path.join(tmp, 'README.md'), 'w') as f:
            f.write(bad)
        got = check(tmp)
        want = ["'docs/gone.md': no file docs/gone.md", "docs/a.md has no heading with anchor "
                "#not-there", "README.md has no heading with anchor #nowhere",
                "'../../etc/passwd' leaves the source tree", '#not-a-ref',
                'docs/a.md has no section "Gone section"', '#wrapped-away', 'docs/b.md is named but there is no such file',
                'lines, the entry page must stay under']
        missing = [w for w in want if not any(w in p for p in got)]
        if missing or len(got) != len(want):
            print('check_docs: self-test: expected one report for each of %r, got:\n  %s' %
                  (want, '\n  '.join(got)))
            return 1
        print('check_docs: self-test: %d problems found in the broken tree, none in the clean one'
              % len(got))
        return 0
    finally:
        shutil.rmtree(tmp)


def main(argv):
    if len(argv) == 3 and argv[1] == '--self-test':
        return self_test()
    if len(argv) != 2:
        print(__doc__.strip().split('\n\n')[1], file=sys.stderr)
        return 2
    problems = check(os.path.abspath(argv[1]))
    for p in problems:
        print('check_docs: ' + p)
    if not problems:
        print('check_docs: every link and anchor resolves; README.md is short')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
