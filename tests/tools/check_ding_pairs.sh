#!/bin/sh
# tools/cli/ding_pairs.c (build/tools/ding-pairs) on tests/fixtures/ding/mini.txt, a small
# dictionary with one entry per cleaning rule: the kept pairs, the counts per rule,
# deduplication, split sizes, one English sentence never in two splits, determinism, --force,
# and the exit status of usage (2) and run-time (1) errors.
# usage: check_ding_pairs.sh DING_PAIRS_EXE SOURCE_DIR
set -u
exe=$1
src=$2/tests/fixtures/ding/mini.txt
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ding-pairs-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
TAB=$(printf '\t')

mkdir "$tmp/a" "$tmp/b" "$tmp/c"
"$exe" --source "$src" --valid 2 --test 3 "$tmp/a" > "$tmp/a.out" 2>&1 || fail "first run: $(cat "$tmp/a.out")"
grep -q "22 candidates, 14 kept, 8 dropped (tilde/control 1, semicolon 1, brackets 1, slash 1, placeholder 1, lowercase start 1, not a sentence 1, utf-8 1)" "$tmp/a.out" ||
    fail "rule counts: $(cat "$tmp/a.out")"
grep -q "1 with unequal ' | ' counts" "$tmp/a.out" || fail "misaligned count"
grep -q "unique pairs: 13 (1 duplicates removed), 12 distinct English" "$tmp/a.out" || fail "dedup counts"
grep -q "train.tsv 8, valid.tsv 2, test.tsv 3" "$tmp/a.out" || fail "split counts"
[ "$(wc -l < "$tmp/a/train.tsv")" -eq 8 ] && [ "$(wc -l < "$tmp/a/valid.tsv")" -eq 2 ] &&
    [ "$(wc -l < "$tmp/a/test.tsv")" -eq 3 ] || fail "file sizes"

cat > "$tmp/want" <<WANT
Don't worry on my behalf.${TAB}Mach dir keine Sorgen.
Don't worry on my behalf.${TAB}Mach dir meinetwegen keine Sorgen.
Good morning!${TAB}Guten Morgen!
He was totally exhausted.${TAB}Er war völlig fertig.
How are you?${TAB}Wie geht es dir?
I am thirsty.${TAB}Ich bin durstig.
It is open 24/7.${TAB}Das ist 24/7 offen.
My congratulations on your exam!${TAB}Mein Glückwunsch zur bestandenen Prüfung!
That doesn't mean much.${TAB}Das hat nicht viel zu bedeuten.
The house is big.${TAB}Das Haus ist groß.
What a pity!${TAB}Wie schade!
Yes.${TAB}Ja.
You cannot compare the two.${TAB}Das kann man nicht vergleichen.
WANT
cat "$tmp/a/train.tsv" "$tmp/a/valid.tsv" "$tmp/a/test.tsv" | LC_ALL=C sort > "$tmp/got"
LC_ALL=C sort "$tmp/want" > "$tmp/want.sorted"
cmp -s "$tmp/got" "$tmp/want.sorted" || fail "kept pairs differ: $(diff "$tmp/want.sorted" "$tmp/got")"
# the English sentence with two translations is in one file only
[ "$(grep -l "^Don't worry" "$tmp/a/"*.tsv | wc -l)" -eq 1 ] || fail "one English in two splits"
# no temporaries left
[ "$(ls -A "$tmp/a" | wc -l)" -eq 3 ] || fail "extra files: $(ls -A "$tmp/a")"

# deterministic; another seed gives another split
"$exe" --source "$src" --valid 2 --test 3 "$tmp/b" > /dev/null || fail "second run"
for f in train valid test; do cmp -s "$tmp/a/$f.tsv" "$tmp/b/$f.tsv" || fail "not deterministic: $f"; done
"$exe" --source "$src" --valid 2 --test 3 --seed 7 "$tmp/c" > /dev/null || fail "seed 7"
cat "$tmp/a/test.tsv" "$tmp/a/valid.tsv" > "$tmp/s1"; cat "$tmp/c/test.tsv" "$tmp/c/valid.tsv" > "$tmp/s7"
cmp -s "$tmp/s1" "$tmp/s7" && fail "seed 7 gives the split of seed 1"

# existing files: refused (1) and left alone, replaced with --force
cp "$tmp/c/test.tsv" "$tmp/c.test"
"$exe" --source "$src" --valid 2 --test 3 "$tmp/c" > /dev/null 2> "$tmp/err"
[ $? -eq 1 ] || fail "overwrite without --force"
grep -q "exists; give --force" "$tmp/err" || fail "overwrite message: $(cat "$tmp/err")"
cmp -s "$tmp/c/test.tsv" "$tmp/c.test" || fail "refused run changed a file"
"$exe" --source "$src" --valid 2 --test 3 --force "$tmp/c" > /dev/null || fail "--force"
cmp -s "$tmp/a/test.tsv" "$tmp/c/test.tsv" || fail "--force did not replace"

# usage errors: 2; run-time errors: 1 (one line naming the problem)
expect() { # status pattern args...
    st=$1 pat=$2; shift 2
    "$exe" "$@" > /dev/null 2> "$tmp/err"; got=$?
    [ "$got" -eq "$st" ] || fail "'$*': exit $got, want $st ($(cat "$tmp/err"))"
    grep -q "$pat" "$tmp/err" || fail "'$*': message $(cat "$tmp/err"), want $pat"
}
mkdir "$tmp/d"
expect 2 "unknown option" --bogus "$tmp/d"
expect 2 "no output directory" --source "$src"
expect 2 "integer" --seed -1 "$tmp/d"
expect 2 "integer" --valid x "$tmp/d"
expect 2 "more than one output" "$tmp/d" "$tmp/d"
expect 1 "cannot open '$tmp/none'" --source "$tmp/none" "$tmp/d"
expect 1 "is not a regular file" --source "$tmp" "$tmp/d"
expect 1 "is not a directory" --source "$src" "$src"
expect 1 "cannot create the directory" --source "$src" "$tmp/no/such/dir"
"$exe" --source "$src" --valid 2 --test 3 "$tmp/new" >/dev/null 2>&1 || fail "a missing output directory is not created"
[ -f "$tmp/new/train.tsv" ] || fail "no train.tsv in the created directory"
expect 1 "only 13 unique pairs" --source "$src" --test 12 --valid 2 "$tmp/d"
printf 'no entries here\n' > "$tmp/empty.txt"
expect 1 "no dictionary entries" --source "$tmp/empty.txt" "$tmp/d"
[ "$(ls -A "$tmp/d" | wc -l)" -eq 0 ] || fail "a failed run left files: $(ls -A "$tmp/d")"
echo "ok"
