# The snapshot engine on a file:// store (tests/integration/store_cases.sh),
# plus what only a file system shows: atomic writes, no temporary files
# left behind.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/store_cases.sh"

mkdir -p "$T/store"
store_cases file "file://$T/store" raw_file
store_page_cases file "file://$T/store"
foreign_cases file "file://$T/store" raw_file

check "file: no temporary file is left in the store" \
    bash -c "! find '$T/store' -name '*.tmp.*' | grep -q ."
check "file: chunks live under <job>/chunks/<2 hex>/<64 hex>" \
    bash -c "find '$T/store/job-file/chunks' -type f | grep -qE '/chunks/([0-9a-f]{2})/\\1[0-9a-f]{62}\$'"
