# examples/grafana/dashboard.json against the metrics spotd exposes
# (tests/integration/grafana_dashboard.py says what is checked), and the
# checker against broken copies: a misspelt metric, a key given twice, a
# panel without a data source, a counter read bare must each be refused.
. "$(dirname "$0")/lib.sh"

DASH="$TOP/examples/grafana/dashboard.json"
README="$TOP/examples/grafana/README.md"
CHECK="$TOP/tests/integration/grafana_dashboard.py"

if ! command -v python3 >/dev/null; then
    echo "SKIP: grafana (no python3)"
    exit 0
fi
python3 "$CHECK" check "$DASH" "$README" >"$T/check.out" 2>&1
expect_eq "grafana: the dashboard parses strictly, every panel reads \${DS_PROMETHEUS} with targets, every metric is spotd's and on a panel, the README names every panel" \
    0 "$?"
sed 's/^/  /' "$T/check.out"

# refused NAME WHAT PYTHON: a copy changed by PYTHON (d: the text) is refused, saying WHAT.
refused() {
    python3 -c 'import sys
d = open(sys.argv[1]).read()
'"$3"'
open(sys.argv[2], "w").write(d)' "$DASH" "$T/broken.json" || { fail "grafana: $1" "no copy"; return; }
    if cmp -s "$DASH" "$T/broken.json"; then
        fail "grafana: $1" "the copy is not changed"
        return
    fi
    python3 "$CHECK" check "$T/broken.json" >"$T/broken.out" 2>&1
    local rc=$?
    if [ $rc = 1 ] && grep -q -- "$2" "$T/broken.out"; then
        pass "grafana: $1"
    else
        fail "grafana: $1" "exit $rc: $(head -n 3 "$T/broken.out")"
    fi
}
refused "a copy with a misspelt metric is refused" "spotd_gpu_utilisation_ratio is not a metric" \
    'd = d.replace("spotd_gpu_utilization_ratio{", "spotd_gpu_utilisation_ratio{", 1)'
refused "... and one that leaves a metric off every panel" "spotd_trainer_step is on no panel" \
    'd = d.replace("spotd_trainer_step{", "spotd_trainer_steps_per_second{")'
refused "a copy with a key given twice is refused" "given twice" \
    'd = d.replace("\"title\": \"GPU memory\",", "\"title\": \"GPU memory\", \"title\": \"x\",", 1)'
refused "a copy with a panel without a data source is refused" "datasource is not" \
    'import json; j = json.loads(d); del j["panels"][3]["datasource"]; d = json.dumps(j, indent=2)'
refused "a copy reading a counter without rate() or increase() is refused" "read it through rate" \
    'import re; d = re.sub(r"rate\((spotd_command_cpu_seconds_total\{[^}]*\})\[[^]]*\]\)", r"\1", d)'

# PromQL itself, where promtool is installed (Debian: the prometheus package).
if command -v promtool >/dev/null; then
    python3 "$CHECK" exprs "$DASH" | python3 -c 'import json, sys
rules = [{"record": "dashboard:expr_%d" % i, "expr": e} for i, e in enumerate(sys.stdin.read().splitlines())]
json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, sys.stdout)' >"$T/rules.yml"
    check "grafana: every expression parses as PromQL (promtool)" \
        eval 'promtool check rules "$T/rules.yml" >"$T/promtool.out" 2>&1 || { cat "$T/promtool.out"; false; }'
else
    echo "SKIP: grafana: PromQL syntax (no promtool here)"
fi
