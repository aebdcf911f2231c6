# make install / uninstall with PREFIX and DESTDIR; a program built against
# the installed libckpt through pkg-config; spotctl's answers.
. "$(dirname "$0")/lib.sh"

root=$T/root
make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" install PREFIX=/usr DESTDIR="$root" >"$T/make.log" 2>&1
check "install: make install exits 0" [ $? -eq 0 ]
missing=""
for f in usr/bin/spotd usr/bin/spotctl usr/lib/libckpt.a usr/lib/libckpt.so.0 usr/lib/libckpt.so \
         usr/include/ckpt.h usr/lib/pkgconfig/libckpt.pc usr/lib/python3/dist-packages/libckpt.py \
         usr/share/spotd/hooks/pre-checkpoint usr/share/spotd/hooks/post-restore; do
    [ -e "$root/$f" ] || missing="$missing $f"
done
expect_eq "install: every file in place under DESTDIR/PREFIX" "" "$missing"
check "install: libckpt.pc names the prefix" grep -qx 'libdir=/usr/lib' "$root/usr/lib/pkgconfig/libckpt.pc"

cat >"$T/prog.c" <<'C'
#include <ckpt.h>
#include <stdio.h>
int main(void)
{
    printf("%s|%s\n", ckpt_version(), ckpt_strerror(CKPT_E_CONNECT));
    return 0;
}
C
flags=$(PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$root/usr/lib/pkgconfig" \
        pkg-config --cflags --libs libckpt)
cc ${SANITIZE:+-fsanitize=$SANITIZE} -o "$T/prog" "$T/prog.c" $flags >"$T/cc.log" 2>&1
check "install: a program compiles and links against libckpt via pkg-config" [ $? -eq 0 ]
out=$(LD_LIBRARY_PATH="$root/usr/lib" "$T/prog" 2>&1)
expect_eq "install: the program runs on the installed libckpt.so" \
    "0.1.0|cannot connect to spotd's control socket" "$out"
# Only the ckpt_* API is exported.
others=$(nm -D --defined-only "$root/usr/lib/libckpt.so.0" | awk '$2 == "T" && $3 !~ /^ckpt_/' | wc -l)
expect_eq "install: libckpt.so exports only ckpt_*" 0 "$others"

make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" uninstall PREFIX=/usr DESTDIR="$root" >>"$T/make.log" 2>&1
left=$(find "$root" -type f -o -type l | wc -l)
expect_eq "install: make uninstall removes every file" 0 "$left"

"$SPOTCTL" help >"$T/out" 2>&1
check "spotctl: help exits 0 and lists the commands" \
    sh -c "[ $? -eq 0 ] && grep -q verify '$T/out' && grep -q drill '$T/out'"
env -u SPOTD_STORE "$SPOTCTL" ls --job j >"$T/out" 2>&1
rc=$?
check "spotctl: a store command without a store exits 2 and says what is missing" \
    sh -c "[ $rc -eq 2 ] && grep -q -- '--store URL' '$T/out'"
"$SPOTCTL" frobnicate >"$T/out" 2>&1
rc=$?
check "spotctl: an unknown command exits 2 and names it" \
    sh -c "[ $rc -eq 2 ] && grep -q \"unknown command 'frobnicate'\" '$T/out'"
expect_eq "spotctl: --version" "spotctl 0.1.0" "$("$SPOTCTL" --version)"
expect_eq "spotd: --version" "spotd 0.1.0" "$("$SPOTD" --version)"

# The daemon commands without a daemon: what to check, exit 1.
"$SPOTCTL" status --state-dir "$T/nowhere" >"$T/out" 2>&1
rc=$?
check "spotctl status: no spotd there: exit 1, saying what to check" \
    sh -c "[ $rc -eq 1 ] && grep -q 'cannot connect to spotd.s control socket .*is spotd running' '$T/out'"
"$SPOTCTL" status >"$T/out" 2>&1
check "spotctl status: which spotd, when nothing says" grep -q "give --socket, --state-dir or --job" "$T/out"
