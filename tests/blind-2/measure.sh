#!/usr/bin/env bash
# Baseline detection of the blind-recall2 set by `trainops validate` as it is now.
# Usage: measure.sh [SET_DIR] [MAIN_DIR]
# Runs, from MAIN_DIR:  .venv/bin/trainops validate --no-cache --format json <case>/{bad,good}.yaml
# (--no-cache only so that a later run never sees a stale cached result), keeps stdout and
# the exit code under SET_DIR/baseline-raw/, then writes SET_DIR/baseline.tsv and the totals
# section of SET_DIR/BASELINE.md from them and SET_DIR/referee.tsv.
#
# DETECTED: bad.yaml has an error/warning finding whose (rule, resource, path) key does not occur
#   among good.yaml's findings (any severity); findings with rule schema-missing or a message
#   containing "no schema for" never count.
# DETECTED-AS-ERROR: at least one such finding is an error.
# FALSE ERROR: good.yaml has an error finding (schema-missing / "no schema for" excluded; they are
#   listed separately in the note).
set -u
SET=${1:?usage: measure.sh SET_DIR [MAIN_DIR]}
MAIN=${2:-$(pwd)}
RAW="$SET/baseline-raw"
mkdir -p "$RAW"
cd "$MAIN" || exit 2
for d in "$SET"/[0-9][0-9][0-9]-*/; do
  c=$(basename "$d")
  for f in bad good; do
    .venv/bin/trainops validate --no-cache --format json "$d$f.yaml" >"$RAW/$c.$f.json" 2>"$RAW/$c.$f.stderr"
    echo $? >"$RAW/$c.$f.rc"
  done
done
python3 - "$SET" <<'PY'
import csv, json, os, sys, collections
S = sys.argv[1]; RAW = os.path.join(S, "baseline-raw")
ref = {}
with open(os.path.join(S, "referee.tsv")) as fh:
    for r in csv.DictReader(fh, delimiter="\t"):
        ref[r["case"]] = r
fam = {}
with open(os.path.join(S, "SOURCES.tsv")) as fh:
    for r in csv.DictReader(fh, delimiter="\t"):
        fam[r["case"]] = r["family"]
def load(c, f):
    p = os.path.join(RAW, f"{c}.{f}.json")
    rc = open(os.path.join(RAW, f"{c}.{f}.rc")).read().strip()
    try:
        return json.load(open(p)).get("findings", []), rc
    except Exception as e:
        return None, rc
def counts(x):
    return x.get("rule") == "schema-missing" or "no schema for" in (x.get("message") or "")
rows = []
for c in sorted(fam):
    bad, rcb = load(c, "bad"); good, rcg = load(c, "good")
    note = []
    if bad is None or good is None:
        rows.append(dict(case=c, referee=ref.get(c, {}).get("verdict", "?"), detected="unreadable",
                         as_error="no", good_errors="", bad_findings_new="",
                         note=f"rc bad={rcb} good={rcg}"))
        continue
    gkeys = {(x["rule"], x["resource"], x["path"]) for x in good}
    new = [x for x in bad if x["severity"] in ("error", "warning") and not counts(x)
           and (x["rule"], x["resource"], x["path"]) not in gkeys]
    gerr = sorted({x["rule"] for x in good if x["severity"] == "error" and not counts(x)})
    gsm = [x for x in good if x["severity"] == "error" and counts(x)]
    det = bool(new); aserr = any(x["severity"] == "error" for x in new)
    bnew = "; ".join(sorted({f'{x["severity"][0].upper()}:{x["rule"]}@{x["resource"]}:{x["path"]}' for x in new}))
    note.append(f"rc bad={rcb} good={rcg}")
    if gsm: note.append(f"good has {len(gsm)} schema-missing error(s), not counted")
    rows.append(dict(case=c, referee=ref.get(c, {}).get("verdict", "?"), detected="yes" if det else "no",
                     as_error="yes" if aserr else "no", good_errors=",".join(gerr),
                     bad_findings_new=bnew, note="; ".join(note)))
with open(os.path.join(S, "baseline.tsv"), "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=["case", "referee", "detected", "as_error", "good_errors", "bad_findings_new", "note"],
                       delimiter="\t", lineterminator="\n")
    w.writeheader(); w.writerows(rows)
scope = [r for r in rows if r["referee"] in ("valid", "severity-wrong")]
def tot(rs):
    return (len(rs), sum(r["detected"] == "yes" for r in rs), sum(r["as_error"] == "yes" for r in rs),
            sum(bool(r["good_errors"]) for r in rs))
out = []
n, d, e, g = tot(scope)
out.append(f"Scope: {n} cases refereed valid or severity-wrong (of {len(rows)}).\n")
out.append(f"- detected: {d}/{n}\n- detected as error: {e}/{n}\n- goods with a false error: {g}/{n}\n")
ref_err = [r for r in scope if ref[r["case"]]["expected_after_referee"] == "error"]
out.append(f"- expected error after referee: {len(ref_err)}; of them detected as error: "
           f"{sum(r['as_error']=='yes' for r in ref_err)}\n")
out.append("\n| family | cases | detected | as error | goods with false error |\n|---|---|---|---|---|\n")
byf = collections.defaultdict(list)
for r in scope: byf[fam[r["case"]]].append(r)
for f in sorted(byf):
    n, d, e, g = tot(byf[f]); out.append(f"| {f} | {n} | {d} | {e} | {g} |\n")
fr = collections.Counter(x for r in scope for x in r["good_errors"].split(",") if x)
out.append("\nFalse-error rules on good.yaml (cases): " + (", ".join(f"{k} ({v})" for k, v in fr.most_common()) or "none") + "\n")
# Referee judgement (referee.tsv notes): these good.yaml errors flag a real defect that bad.yaml and
# good.yaml share, so they are not false. Everything else counted above stays a false error.
SHARED = {("rendezvous-host-resolves", c) for c in ["033", "034", "035", "036", "037", "038", "039", "040", "044"]}
SHARED |= {("schema", c) for c in ["041", "042", "043"]}
adj = [r for r in scope if [x for x in r["good_errors"].split(",") if x and (x, r["case"][:3]) not in SHARED]]
out.append(f"Goods with a false error once errors that flag a real shared defect are set aside: {len(adj)}/{len(scope)}\n")
allr = tot(rows)
out.append(f"\nAll {len(rows)} cases regardless of referee: detected {allr[1]}, as error {allr[2]}, goods with false error {allr[3]}.\n")
open(os.path.join(RAW, "totals.md"), "w").write("".join(out))
print("".join(out))
PY
