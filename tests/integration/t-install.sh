# make install / uninstall with PREFIX and DESTDIR; a program built against
# the installed libckpt through pkg-config; the man pages (rendered, and
# every option and function in them), the systemd units, the default
# configuration; make dist; spotctl's answers.
. "$(dirname "$0")/lib.sh"

version=$("$SPOTD" --version | sed 's/^spotd //')

root=$T/root
make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" install PREFIX=/usr DESTDIR="$root" >"$T/make.log" 2>&1
check "install: make install exits 0" [ $? -eq 0 ]
missing=""
for f in usr/bin/spotd usr/bin/spotctl usr/bin/spotd-init usr/lib/libckpt.a usr/lib/libckpt.so.0 \
         usr/lib/libckpt.so usr/include/ckpt.h usr/lib/pkgconfig/libckpt.pc \
         usr/lib/python3/dist-packages/libckpt.py \
         usr/share/spotd/hooks/pre-checkpoint usr/share/spotd/hooks/post-restore \
         usr/share/man/man1/spotctl.1 usr/share/man/man3/libckpt.3 usr/share/man/man8/spotd.8 \
         usr/lib/systemd/system/spotd.service usr/lib/systemd/system/spotd@.service \
         etc/spotd/spotd.json; do
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
libv=$(awk '$1 == "#define" && $2 ~ /^CKPT_VERSION_(MAJOR|MINOR|PATCH)$/ { printf "%s%s", sep, $3; sep = "." }' \
    "$TOP/include/ckpt.h")
expect_eq "install: the program runs on the installed libckpt.so" \
    "$libv|cannot connect to spotd's control socket" "$out"
# Only the ckpt_* API is exported.
others=$(nm -D --defined-only "$root/usr/lib/libckpt.so.0" | awk '$2 == "T" && $3 !~ /^ckpt_/' | wc -l)
expect_eq "install: libckpt.so exports only ckpt_*" 0 "$others"

# ---- man pages ---------------------------------------------------------------------
# man -l and groff come with man-db (.ci/run installs it); as root, here too.
if { ! command -v man || ! command -v groff; } >/dev/null && [ "$(id -u)" = 0 ] &&
   command -v apt-get >/dev/null; then
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q man-db ||
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q man-db; }
    } >"$T/apt.log" 2>&1 || tail -n 5 "$T/apt.log"
fi
mandir=$root/usr/share/man
declare -A sections=(
    [man8/spotd.8]="NAME|SYNOPSIS|DESCRIPTION|COMMANDS|OPTIONS|CONFIGURATION FILE|EXIT STATUS|SIGNALS|ENVIRONMENT|FILES|EXAMPLES|SEE ALSO"
    [man1/spotctl.1]="NAME|SYNOPSIS|DESCRIPTION|STORE COMMANDS|DAEMON COMMANDS|STORE OPTIONS|JSON OUTPUT|EXIT STATUS|ENVIRONMENT|FILES|EXAMPLES|SEE ALSO"
    [man3/libckpt.3]="NAME|LIBRARY|SYNOPSIS|DESCRIPTION|RETURN VALUE|ENVIRONMENT|EXAMPLES|PYTHON|NOTES|SEE ALSO"
)
for page in man8/spotd.8 man1/spotctl.1 man3/libckpt.3; do
    f=$mandir/$page
    check "man $page: .TH says spotd $version" grep -q "^\.TH .* \"spotd $version\" " "$f"
    if command -v man >/dev/null && command -v groff >/dev/null; then
        expect_eq "man $page: man -l renders it without a warning" "" \
            "$(MANWIDTH=80 man -l "$f" 2>&1 >/dev/null)"
        expect_eq "man $page: groff -man -ww finds nothing to warn about" "" \
            "$(groff -man -ww -z "$f" 2>&1)"
        # Headings are the only lines that start in the first column.
        expect_eq "man $page: its sections" "${sections[$page]}" \
            "$(MANWIDTH=80 man -l "$f" 2>/dev/null | grep -E '^[A-Z][A-Z ]*[A-Z]$' | paste -sd '|')"
    else
        echo "SKIP: man $page: rendering (no man or groff here; apt-get install man-db)"
    fi
    if command -v mandoc >/dev/null; then
        expect_eq "man $page: mandoc -T lint finds nothing" "" "$(mandoc -T lint -W warning "$f" 2>&1)"
    fi
done

# roff_has FILE FLAG: FILE names --flag, written \-\-flag in roff, and not
# merely as the start of a longer one (--world-key in --world-key-file).
roff_has() {
    grep -qE -- "$(printf '%s' "$2" | sed 's/-/\\\\-/g')([^\\\\A-Za-z0-9_]|$)" "$1"
}
absent=""
while read -r key flag env _; do
    [ "$key" = KEY ] && continue
    roff_has "$mandir/man8/spotd.8" "$flag" || absent="$absent $flag"
    grep -qwF -- "$env" "$mandir/man8/spotd.8" || absent="$absent $env"
    [ "$key" = - ] || grep -qwF -- "$key" "$mandir/man8/spotd.8" || absent="$absent $key"
done < <("$SPOTD" help | grep -v '\[not implemented yet: ')
expect_eq "man spotd.8: every option of 'spotd help', as flag, key and variable" "" "$absent"

absent=""
cmds=$("$SPOTCTL" help | sed -n 's/^  \([a-z][a-z]*\)\( .*\)\{0,1\}$/\1/p' | sort -u)
for c in $cmds; do
    grep -qx "\.B spotctl $c" "$mandir/man1/spotctl.1" || absent="$absent $c"
done
for o in $({ "$SPOTCTL" help; for c in $cmds; do "$SPOTCTL" "$c" --help; done; } 2>/dev/null |
           grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u); do
    roff_has "$mandir/man1/spotctl.1" "$o" || absent="$absent $o"
done
check "man spotctl.1: 'spotctl help' lists commands (at least ten)" [ "$(echo $cmds | wc -w)" -ge 10 ]
expect_eq "man spotctl.1: every command and option of spotctl help and COMMAND --help" "" "$absent"

absent=""
name=$(sed -n '/^\.SH NAME/,/^\.SH SYNOPSIS/p' "$mandir/man3/libckpt.3")
for fn in $(grep -oE '\bckpt_[a-z_]+\(' "$TOP/include/ckpt.h" | tr -d '(' | sort -u); do
    { grep -qw "$fn" <<<"$name" && grep -qx "\.BR $fn ()" "$mandir/man3/libckpt.3"; } ||
        absent="$absent $fn"
done
for e in $(grep -oE '^ *CKPT_E_[A-Z]+ =' "$TOP/include/ckpt.h" | tr -d ' ='); do
    grep -q "^\.BR $e \"" "$mandir/man3/libckpt.3" || absent="$absent $e"
done
expect_eq "man libckpt.3: every function and error code of ckpt.h, each described" "" "$absent"

# ---- systemd units, default configuration -------------------------------------------
unitdir=$root/usr/lib/systemd/system
expect_eq "systemd: spotd.service runs the installed spotd on the installed configuration" \
    "ExecStart=/usr/bin/spotd run --config /etc/spotd/spotd.json" \
    "$(grep '^ExecStart=' "$unitdir/spotd.service")"
expect_eq "systemd: spotd@.service, a configuration and a state directory per instance" \
    "ExecStart=/usr/bin/spotd run --config /etc/spotd/%i.json --state-dir %S/spotd/%i" \
    "$(grep '^ExecStart=' "$unitdir/spotd@.service")"
for u in spotd.service spotd@.service; do
    # SIGTERM to spotd alone (a notice: save, commit, stop), time for it,
    # and 75 (preempted, state saved) is a success never restarted.
    expect_eq "systemd: $u stops as spotd needs" \
        "KillMode=mixed|TimeoutStopSec=150s|SuccessExitStatus=75|Restart=on-failure|RestartPreventExitStatus=75 125 126 127" \
        "$(grep -E '^(KillMode|TimeoutStopSec|SuccessExitStatus|Restart|RestartPreventExitStatus)=' \
             "$unitdir/$u" | paste -sd '|')"
    check "systemd: $u after the network, with its state directory and an optional env file" \
        eval "grep -qx 'After=network-online.target' '$unitdir/$u' &&
              grep -qx 'Wants=network-online.target' '$unitdir/$u' &&
              grep -q '^StateDirectory=spotd' '$unitdir/$u' &&
              grep -qx 'EnvironmentFile=-/etc/spotd/spotd.env' '$unitdir/$u'"
done

cfg=$root/etc/spotd/spotd.json
check "config: the installed spotd.json is the shipped etc/spotd.json" cmp -s "$TOP/etc/spotd.json" "$cfg"
"$root/usr/bin/spotd" config --config "$cfg" >"$T/cfg.out" 2>"$T/cfg.err"
rc=$?
expect_eq "config: the installed spotd.json passes 'spotd config --config', silently" "0|" \
    "$rc|$(cat "$T/cfg.err")"
check "config: it holds no command and no job (checkpoints off)" \
    eval "grep -Eq '\"command\":[[:space:]]*null' '$T/cfg.out' &&
          grep -Eq '\"job\":[[:space:]]*null' '$T/cfg.out'"

make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" uninstall PREFIX=/usr DESTDIR="$root" >>"$T/make.log" 2>&1
left=$(find "$root" -type f -o -type l | wc -l)
expect_eq "install: make uninstall removes every file" 0 "$left"

# An edited configuration is the admin's: a second install keeps it, and
# uninstall leaves it (and only it).
make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" install PREFIX=/usr DESTDIR="$root" >>"$T/make.log" 2>&1
sed -i 's/"restart": "never"/"restart": "on-failure"/' "$cfg"
make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" install PREFIX=/usr DESTDIR="$root" >"$T/make2.log" 2>&1
check "install: a second install keeps an edited spotd.json, and says so" \
    eval "grep -q '\"restart\": \"on-failure\"' '$cfg' && grep -q 'keeping .*spotd.json' '$T/make2.log'"
make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" uninstall PREFIX=/usr DESTDIR="$root" >"$T/make2.log" 2>&1
expect_eq "uninstall: an edited spotd.json stays, nothing else" "./etc/spotd/spotd.json" \
    "$(cd "$root" && find . -type f -o -type l)"
rm -f "$cfg"

# Another prefix (no DESTDIR): the units name that spotd and configuration.
p=$T/prefix
make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" install PREFIX="$p" SYSCONFDIR="$p/etc" \
    >"$T/make3.log" 2>&1
check "install PREFIX=DIR: exits 0, spotd in DIR/bin" [ -x "$p/bin/spotd" ]
expect_eq "install PREFIX=DIR: spotd.service runs that spotd on that configuration" \
    "ExecStart=$p/bin/spotd run --config $p/etc/spotd/spotd.json" \
    "$(grep '^ExecStart=' "$p/lib/systemd/system/spotd.service")"
check "install PREFIX=DIR SYSCONFDIR=DIR/etc: the default configuration is there" [ -f "$p/etc/spotd/spotd.json" ]
if command -v systemd-analyze >/dev/null; then
    out=$(cd "$T" && MANPATH="$p/share/man" systemd-analyze verify \
              --man="$(command -v man >/dev/null && echo yes || echo no)" \
              "$p/lib/systemd/system/spotd.service" "$p/lib/systemd/system/spotd@.service" 2>&1)
    rc=$?
    expect_eq "systemd-analyze verify: both installed units" "0|" "$rc|$out"
else
    echo "SKIP: systemd-analyze verify: no systemd-analyze here"
fi
make -s -C "$TOP" O="$O" SANITIZE="${SANITIZE:-}" uninstall PREFIX="$p" SYSCONFDIR="$p/etc" \
    >>"$T/make3.log" 2>&1
expect_eq "uninstall PREFIX=DIR: removes every file" "" "$(find "$p" -type f -o -type l)"

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

# ---- make dist ---------------------------------------------------------------------
# The tarball is exactly the tracked files, and builds without git.  Only
# "make all": the whole suite in it would double the time of this one.
if [ -e "$TOP/.git" ] && command -v git >/dev/null; then
    make -s -C "$TOP" O="$T/dist" dist >"$T/dist.log" 2>&1
    check "dist: make dist exits 0" [ $? -eq 0 ]
    tarball=$T/dist/spotd-$version.tar.gz
    expect_eq "dist: spotd-$version.tar.gz holds exactly git ls-files, under spotd-$version/" "" \
        "$(diff <(git -C "$TOP" ls-files | sort) \
                <(tar tzf "$tarball" 2>&1 | sed "s|^spotd-$version/||" | sort) | head -n 20)"
    if [ -n "${SANITIZE:-}" ]; then
        echo "SKIP: dist: the tarball's build (done by the run without SANITIZE)"
    else
        mkdir -p "$T/unpacked" "$T/nogit"
        tar xzf "$tarball" -C "$T/unpacked"
        # A git that records its calls and fails: the build must not need one.
        printf '#!/bin/sh\necho "git $*" >>"%s"\nexit 1\n' "$T/git.log" >"$T/nogit/git"
        chmod +x "$T/nogit/git"
        (cd "$T/unpacked/spotd-$version" &&
         PATH="$T/nogit:$PATH" make -s -j2 O="$T/unpacked/build" all) >"$T/dist-build.log" 2>&1
        rc=$?
        check "dist: the unpacked tarball builds (make all)" [ $rc -eq 0 ]
        [ $rc -eq 0 ] || tail -n 20 "$T/dist-build.log"
        expect_eq "dist: its build never runs git" "" "$(cat "$T/git.log" 2>/dev/null)"
        expect_eq "dist: the spotd it built" "spotd $version" \
            "$("$T/unpacked/build/spotd" --version 2>&1)"
    fi
else
    echo "SKIP: dist: not a git checkout ($TOP/.git or git missing): nothing to compare the tarball with"
    make -s -C "$TOP" O="$T/dist" dist >"$T/dist.log" 2>&1
    check "dist: without git, make dist refuses and says why" \
        eval "[ $? -ne 0 ] && grep -q 'run it in a git checkout' '$T/dist.log'"
fi
