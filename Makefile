# spotd: plain GNU make.  See README.md.
#
#   make                      spotd, spotctl, libckpt.{a,so}
#   make check                build and run the whole test suite, suites side
#                             by side (SPOTD_TEST_JOBS at a time)
#   make check TESTS="unit t-world.sh"   only those suites (unit, mocks, fuzz,
#                             integration scripts)
#   make check-build          what make check runs, built only
#   make demo                 checkpoint the C trainer at a drill notice, resume it
#   make install              PREFIX=/usr/local DESTDIR= (also MANDIR, UNITDIR, SYSCONFDIR)
#   make uninstall            the same variables
#   make dist                 $(O)/spotd-VERSION.tar.gz: the files git tracks
#   make SANITIZE=address,undefined check
#   make DEV=1                -Werror and the strict warning set
#
# Libraries come from pkg-config only.  When one is missing, build/config.mk
# cannot be generated: as root the Debian/Ubuntu packages are installed, as
# anyone else the exact apt-get line is printed.

.DEFAULT_GOAL := all
VERSION    := 0.1.0
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCDIR     ?= $(PREFIX)/include
PKGDIR     ?= $(LIBDIR)/pkgconfig
DATADIR    ?= $(PREFIX)/share
PYDIR      ?= $(PREFIX)/lib/python3/dist-packages
MANDIR     ?= $(PREFIX)/share/man
UNITDIR    ?= $(PREFIX)/lib/systemd/system
# spotd reads /etc/spotd/spotd.json whatever the prefix; the units name the
# installed file.
SYSCONFDIR ?= /etc
HOOKS      := on-notice pre-checkpoint post-checkpoint pre-restore post-restore
MANPAGES   := man/spotctl.1 man/libckpt.3 man/spotd.8
UNITS      := spotd.service spotd@.service

CC         ?= cc
PKG_CONFIG ?= pkg-config

ifneq ($(SANITIZE),)
O          ?= build-san
else
O          ?= build
endif

PKGS     := libevent libevent_pthreads libcurl libcjson libzstd libcrypto libxxhash
DEB_PKGS := pkg-config libevent-dev libcurl4-openssl-dev libcjson-dev libzstd-dev libssl-dev \
            libxxhash-dev

WARN       := -Wall -Wextra -Wno-unused-parameter
WARN_DEV   := -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
              -Wformat=2 -Wpointer-arith -Wcast-qual -Wwrite-strings -Wundef \
              -Wvla -Wimplicit-fallthrough -Wnull-dereference -Wold-style-definition \
              -Wmissing-declarations -Wredundant-decls
CFLAGS     ?= -O2 -g
ALL_CFLAGS  = -std=gnu11 $(WARN) $(if $(DEV),$(WARN_DEV)) -fvisibility=hidden \
              -D_GNU_SOURCE -DSPOT_VERSION='"$(VERSION)"' -Iinclude -Ilib \
              $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all) \
              $(DEP_CFLAGS) $(CFLAGS) $(CPPFLAGS)
ALL_LDFLAGS = -Wl,--as-needed $(if $(SANITIZE),-fsanitize=$(SANITIZE)) $(LDFLAGS)

# Generated once: pkg-config's answers, after the dependency check.
ifeq ($(filter clean uninstall dist,$(MAKECMDGOALS)),)
include $(O)/config.mk
endif
$(O)/config.mk: Makefile
	@mkdir -p $(O)
	@if ! $(PKG_CONFIG) --exists $(PKGS) 2>/dev/null; then \
	    missing=""; for p in $(PKGS); do $(PKG_CONFIG) --exists $$p 2>/dev/null || missing="$$missing $$p"; done; \
	    echo "spotd: missing libraries:$${missing:- pkg-config}"; \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        echo "spotd: installing $(DEB_PKGS)"; \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(DEB_PKGS) >/dev/null 2>&1 || \
	        { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(DEB_PKGS); } || exit 1; \
	    else \
	        echo "spotd: run: sudo apt-get install -y $(DEB_PKGS)"; exit 1; \
	    fi; \
	fi
	@{ echo "SPOTD_LIBS := $$($(PKG_CONFIG) --libs libevent libcjson) -ldl"; \
	   echo "SPOTCTL_LIBS := $$($(PKG_CONFIG) --libs libevent libevent_pthreads libcjson libzstd libcrypto libxxhash) -ldl -lpthread"; \
	   echo "DEP_CFLAGS := $$($(PKG_CONFIG) --cflags $(PKGS))"; \
	   echo "DEP_LIBS := $$($(PKG_CONFIG) --libs $(PKGS))"; } > $@.tmp && mv $@.tmp $@

# lib/spot: the internal library shared by spotd and spotctl.
SPOT_SRC   := lib/spot/log.c lib/spot/parse.c lib/spot/config.c lib/spot/http.c lib/spot/dmi.c \
              lib/spot/pool.c lib/spot/bigbuf.c lib/spot/hash.c lib/spot/chunk.c lib/spot/store.c lib/spot/store_file.c lib/spot/store_s3.c lib/spot/manifest.c lib/spot/snap.c lib/spot/snap_save.c lib/spot/snap_fetch.c lib/spot/snap_stream.c lib/spot/snap_gc.c lib/spot/snap_latest.c lib/spot/zipgrid.c lib/libckpt/jsonl.c \
              lib/spot/notice.c lib/spot/backoff.c lib/spot/timeparse.c lib/spot/cloudparse.c lib/spot/xml.c lib/spot/s3xml.c lib/spot/awscreds.c lib/spot/s3creds.c lib/spot/imds.c \
              lib/spot/strict.c lib/spot/frame.c lib/spot/jobkey.c lib/spot/peermsg.c lib/spot/worldrec.c \
              lib/spot/gpuinv.c lib/spot/proc.c lib/spot/dircheck.c lib/spot/ckptname.c lib/spot/ckptdir.c lib/spot/linktree.c lib/spot/genclaim.c lib/spot/jobtree.c
SPOT_OBJ   := $(SPOT_SRC:%.c=$(O)/%.o)
# libckpt: the trainer's library (include/ckpt.h).
CKPT_SRC   := lib/libckpt/ckpt.c lib/libckpt/jsonl.c
CKPT_OBJ   := $(CKPT_SRC:%.c=$(O)/pic/%.o)
SPOTD_SRC  := supervisord/spotd.c supervisord/child.c supervisord/notices.c supervisord/watch.c \
              supervisord/control.c supervisord/orch_decide.c supervisord/orch.c supervisord/orch_plan.c \
              supervisord/orch_resume.c supervisord/orch_dirs.c supervisord/orch_world.c supervisord/hooks.c supervisord/peer.c \
              supervisord/world.c supervisord/world_decide.c supervisord/rendezvous.c supervisord/metrics.c supervisord/timeline.c \
              supervisord/method.c supervisord/method_app.c supervisord/method_signal.c supervisord/method_dir.c supervisord/follow.c supervisord/imgstream.c \
              supervisord/method_criu.c supervisord/cuda.c supervisord/nvml.c \
              supervisord/watch_local.c supervisord/watch_poll.c supervisord/watch_aws.c \
              supervisord/watch_alibaba.c supervisord/watch_tencent.c supervisord/watch_gcp.c \
              supervisord/watch_azure.c supervisord/webhook.c
SPOTD_OBJ  := $(SPOTD_SRC:%.c=$(O)/%.o)
SPOTCTL_SRC := spotctl/spotctl.c spotctl/store_cmds.c spotctl/store_show.c spotctl/resume.c \
               spotctl/daemon_cmds.c
# Under obj/: $(O)/spotctl is the program itself.
SPOTCTL_OBJ := $(SPOTCTL_SRC:%.c=$(O)/obj/%.o)

UNIT_SRC   := tests/unit/main.c tests/unit/test_parse.c tests/unit/test_ckptname.c tests/unit/test_linktree.c tests/unit/test_ckptdir.c tests/unit/test_config.c tests/unit/test_dmi.c \
              tests/unit/test_pool.c tests/unit/test_hash.c tests/unit/test_chunk.c tests/unit/test_store.c \
              tests/unit/test_log.c tests/unit/test_ckpt.c \
              tests/unit/test_timeparse.c tests/unit/test_cloudparse.c tests/unit/test_s3xml.c tests/unit/test_awscreds.c tests/unit/test_imds.c \
              tests/unit/test_manifest.c tests/unit/test_control.c tests/unit/test_frame.c \
              tests/unit/test_peer.c tests/unit/test_peermsg.c tests/unit/test_snap.c \
              tests/unit/test_worldrec.c tests/unit/test_world.c tests/unit/test_orch.c tests/unit/test_gpuinv.c tests/unit/test_nvml.c tests/unit/test_proc.c
UNIT_OBJ   := $(UNIT_SRC:%.c=$(O)/%.o)
FUZZ_NAMES := config duration aws azure gcp time termination chunk s3xml awscreds manifest zipgrid jsonl \
              frame peermsg worldrec gpuinv proc latest jobtree
FUZZ_BINS  := $(FUZZ_NAMES:%=$(O)/tests/fuzz/fuzz_%)

PROGS      := $(O)/spotd $(O)/spotctl $(O)/spotd-init
LIBS       := $(O)/libspot.a $(O)/libckpt.a $(O)/libckpt.so.0 $(O)/libckpt.so $(O)/libckpt.pc

EXAMPLES   := $(O)/examples/c-trainer/trainer

all: $(PROGS) $(LIBS) $(EXAMPLES)

$(O)/%.o: %.c $(O)/config.mk
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(SPOTCTL_OBJ): $(O)/obj/%.o: %.c $(O)/config.mk
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(O)/pic/%.o: %.c $(O)/config.mk
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -MMD -MP -c -o $@ $<

$(O)/libspot.a: $(SPOT_OBJ)
	$(AR) rcs $@ $^

$(O)/libckpt.a: $(CKPT_OBJ)
	$(AR) rcs $@ $^

$(O)/libckpt.so.0: $(CKPT_OBJ) lib/libckpt/libckpt.map
	$(CC) -shared -Wl,-soname,libckpt.so.0 -Wl,--version-script=lib/libckpt/libckpt.map \
	    $(ALL_LDFLAGS) -o $@ $(CKPT_OBJ)

$(O)/libckpt.so: $(O)/libckpt.so.0
	ln -sf libckpt.so.0 $@

# The .pc file names the install paths, so install writes it anew.
make_pc = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
              -e 's|@VERSION@|$(VERSION)|' lib/libckpt/libckpt.pc.in
$(O)/libckpt.pc: lib/libckpt/libckpt.pc.in Makefile
	$(make_pc) > $@
# Man pages carry the version; units and the default configuration name the
# installed spotd and configuration (make install writes them).
make_man = sed -e 's|@VERSION@|$(VERSION)|g'
make_paths = sed -e 's|/usr/bin/spotd|$(BINDIR)/spotd|g' -e 's|/etc/spotd/|$(SYSCONFDIR)/spotd/|g'
man_dest = $(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(1)))/$(notdir $(1))

$(O)/spotd: $(SPOTD_OBJ) $(O)/libspot.a
	$(CC) $(ALL_LDFLAGS) -o $@ $(SPOTD_OBJ) $(O)/libspot.a $(SPOTCTL_LIBS)

# The criu method's PID 1 (spotd-init/spotd-init.c): libc only, static,
# and never sanitized: CRIU dumps and restores it with the command.
$(O)/spotd-init: spotd-init/spotd-init.c $(O)/config.mk
	$(CC) -std=gnu11 $(WARN) $(if $(DEV),$(WARN_DEV)) -D_GNU_SOURCE -O2 -static \
	    -o $@ $< $(LDFLAGS)

$(O)/spotctl: $(SPOTCTL_OBJ) $(O)/libspot.a
	$(CC) $(ALL_LDFLAGS) -o $@ $(SPOTCTL_OBJ) $(O)/libspot.a $(SPOTCTL_LIBS)

# The trainer's step is a loop over its state that GCC vectorizes at -O3
# only: its CPU for the same steps falls by more than half, and the suite
# runs trainers all along.
$(O)/examples/c-trainer/trainer.o: CFLAGS += -O3

$(O)/examples/c-trainer/trainer: $(O)/examples/c-trainer/trainer.o $(O)/libckpt.a
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(O)/libckpt.a

UNIT_SPOTD := $(O)/supervisord/orch_decide.o $(O)/supervisord/control.o $(O)/supervisord/peer.o $(O)/supervisord/world.o $(O)/supervisord/world_decide.o \
              $(O)/supervisord/nvml.o
# A TEST() that tests.def does not list would never run.
$(O)/tests/unit/run: $(UNIT_OBJ) $(UNIT_SPOTD) $(O)/libspot.a $(O)/libckpt.a
	@missing=$$(sed -n 's/^TEST(\(.*\))$$/\1/p' tests/unit/test_*.c | \
	    while read -r t; do grep -qx "T($$t)" tests/unit/tests.def || echo "$$t"; done); \
	 [ -z "$$missing" ] || { echo "tests/unit/tests.def does not list:" $$missing; exit 1; }
	$(CC) $(ALL_LDFLAGS) -o $@ $(UNIT_OBJ) $(UNIT_SPOTD) $(O)/libspot.a \
	    $(O)/libckpt.a $(DEP_LIBS) -ldl

# Fuzz targets build as plain programs that replay their corpus (make check);
# with FUZZ=1 (and CC=clang) they are libFuzzer programs:
#   make CC=clang FUZZ=1 O=build-fuzz build-fuzz/tests/fuzz/fuzz_config
#   build-fuzz/tests/fuzz/fuzz_config tests/fuzz/corpus/config
ifeq ($(FUZZ),1)
FUZZ_MAIN  :=
FUZZ_LINK  := -fsanitize=fuzzer,address,undefined
CFLAGS     += -fsanitize=fuzzer-no-link,address,undefined
else
FUZZ_MAIN  := $(O)/tests/fuzz/replay.o
FUZZ_LINK  :=
endif
$(O)/tests/fuzz/fuzz_%: $(O)/tests/fuzz/fuzz_%.o $(FUZZ_MAIN) $(O)/libspot.a $(O)/libckpt.a
	$(CC) $(ALL_LDFLAGS) $(FUZZ_LINK) -o $@ $< \
	    $(FUZZ_MAIN) $(O)/libspot.a $(O)/libckpt.a $(DEP_LIBS)

# A zdtm-style program the criu method snapshots (tests/integration/t-criu.sh);
# never sanitized: CRIU would have to carry the sanitizer's shadow memory.
$(O)/tests/criu/zdtm: tests/criu/zdtm.c $(O)/config.mk
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(WARN) $(if $(DEV),$(WARN_DEV)) -D_GNU_SOURCE -O2 -g -o $@ $< $(LDFLAGS)

# A test double of the driver's libnvidia-ml.so.1 (tests/gpu/fake_nvml.c)
# for tests/integration/t-nvml.sh, alone in its folder for LD_LIBRARY_PATH;
# never sanitized: a sanitized library cannot be loaded into a program
# built without the sanitizer, a plain one loads into both kinds.
FAKE_NVML  := $(O)/tests/gpu/fake/libnvidia-ml.so.1
$(FAKE_NVML): tests/gpu/fake_nvml.c $(O)/config.mk
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(WARN) $(if $(DEV),$(WARN_DEV)) -D_GNU_SOURCE -O2 -g -fPIC -shared \
	    -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 -o $@ $< $(LDFLAGS)

# A wall clock that tests step (tests/clockstep/clockstep.c, LD_PRELOAD),
# as NTP would; never sanitized, for the same reason as FAKE_NVML.
CLOCKSTEP  := $(O)/tests/clockstep/clockstep.so
$(CLOCKSTEP): tests/clockstep/clockstep.c $(O)/config.mk
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(WARN) $(if $(DEV),$(WARN_DEV)) -D_GNU_SOURCE -O2 -g -fPIC -shared \
	    -fvisibility=hidden -o $@ $< -ldl $(LDFLAGS)

check: check-build
	@O=$(O) SANITIZE=$(SANITIZE) tests/run $(TESTS)

check-build: all $(O)/tests/unit/run $(FUZZ_BINS) $(O)/tests/criu/zdtm $(FAKE_NVML) $(CLOCKSTEP)

demo: all
	@O=$(O) examples/c-trainer/demo.sh

bench: all
	@O=$(O) tests/bench/idle.sh
	@O=$(O) tests/bench/detect.sh
	@O=$(O) tests/bench/step.sh
	@O=$(O) BENCH_STEP=0 tests/bench/notice.sh
	@O=$(O) tests/bench/hold.sh
	@O=$(O) tests/bench/stage.sh
	@O=$(O) tests/bench/world.sh
	@O=$(O) tests/bench/criu.sh
	@O=$(O) tests/bench/metrics.sh

# The store against a real Swift (about 10 minutes at 2 GiB), the chunking
# measurements (a few minutes; installs Debian's torch as root), and the
# store at scale (2,000 generations and 2,000 ranks, about 20 minutes).
bench-store: all
	@O=$(O) tests/bench/store.sh
	@O=$(O) tests/bench/resume.sh
	@O=$(O) tests/bench/chunking.sh
	@O=$(O) tests/bench/scale.sh

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(PKGDIR)
	install -m 0755 $(O)/spotd $(O)/spotctl $(O)/spotd-init $(DESTDIR)$(BINDIR)/
	install -m 0644 $(O)/libckpt.a $(DESTDIR)$(LIBDIR)/
	install -m 0755 $(O)/libckpt.so.0 $(DESTDIR)$(LIBDIR)/
	ln -sf libckpt.so.0 $(DESTDIR)$(LIBDIR)/libckpt.so
	install -m 0644 include/ckpt.h $(DESTDIR)$(INCDIR)/
	$(call make_pc) > $(DESTDIR)$(PKGDIR)/libckpt.pc
	install -d $(DESTDIR)$(PYDIR) $(DESTDIR)$(DATADIR)/spotd/hooks
	install -m 0644 lib/python/libckpt.py $(DESTDIR)$(PYDIR)/
	install -m 0755 $(addprefix hooks/,$(HOOKS)) $(DESTDIR)$(DATADIR)/spotd/hooks/
	install -m 0644 hooks/README.md $(DESTDIR)$(DATADIR)/spotd/hooks/
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8 \
	    $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/spotd
	$(foreach m,$(MANPAGES),$(make_man) $(m) >$(call man_dest,$(m)) && \
	    chmod 0644 $(call man_dest,$(m)) &&) true
	$(foreach u,$(UNITS),$(make_paths) examples/systemd/$(u) >$(DESTDIR)$(UNITDIR)/$(u) && \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/$(u) &&) true
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/spotd/spotd.json ]; then \
	    echo "spotd: keeping $(DESTDIR)$(SYSCONFDIR)/spotd/spotd.json (the shipped one is etc/spotd.json)"; \
	else \
	    $(make_paths) etc/spotd.json >$(DESTDIR)$(SYSCONFDIR)/spotd/spotd.json.tmp && \
	    chmod 0644 $(DESTDIR)$(SYSCONFDIR)/spotd/spotd.json.tmp && \
	    mv $(DESTDIR)$(SYSCONFDIR)/spotd/spotd.json.tmp $(DESTDIR)$(SYSCONFDIR)/spotd/spotd.json; \
	fi

# The configuration goes only when it is still the shipped one: an edited
# file is the admin's, and stays.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/spotd $(DESTDIR)$(BINDIR)/spotctl $(DESTDIR)$(BINDIR)/spotd-init \
	      $(DESTDIR)$(LIBDIR)/libckpt.a $(DESTDIR)$(LIBDIR)/libckpt.so.0 \
	      $(DESTDIR)$(LIBDIR)/libckpt.so $(DESTDIR)$(INCDIR)/ckpt.h \
	      $(DESTDIR)$(PKGDIR)/libckpt.pc $(DESTDIR)$(PYDIR)/libckpt.py \
	      $(addprefix $(DESTDIR)$(DATADIR)/spotd/hooks/,$(HOOKS) README.md) \
	      $(foreach m,$(MANPAGES),$(call man_dest,$(m))) $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS))
	-rmdir $(DESTDIR)$(DATADIR)/spotd/hooks $(DESTDIR)$(DATADIR)/spotd 2>/dev/null
	@f=$(DESTDIR)$(SYSCONFDIR)/spotd/spotd.json; \
	if [ -e $$f ] && ! $(make_paths) etc/spotd.json | cmp -s - $$f; then \
	    echo "spotd: keeping $$f: it differs from the shipped one (remove it by hand)"; \
	else \
	    rm -f $$f; rmdir $(DESTDIR)$(SYSCONFDIR)/spotd 2>/dev/null || true; \
	fi

# The files git tracks, as the working tree has them, under spotd-VERSION/;
# the tarball builds and tests without git.  Reproducible: sorted, owned by
# root, dated by the last commit.
DIST := spotd-$(VERSION)
dist:
	@[ -e .git ] && command -v git >/dev/null || \
	    { echo "spotd: make dist packs the files git tracks: run it in a git checkout"; exit 1; }
	@mkdir -p $(O)
	git ls-files -z | tar -cf $(O)/$(DIST).tar.gz.tmp -I 'gzip -9n' --sort=name \
	    --owner=0 --group=0 --numeric-owner --mtime=@$$(git log -1 --format=%ct) \
	    --transform='s|^|$(DIST)/|S' --no-recursion --null --files-from=-
	mv $(O)/$(DIST).tar.gz.tmp $(O)/$(DIST).tar.gz
	@echo "spotd: $(O)/$(DIST).tar.gz, $$(git ls-files | wc -l) files"

clean:
	rm -rf build build-san

.PHONY: all check check-build demo bench bench-store install uninstall dist clean
.DELETE_ON_ERROR:
.SECONDARY:

-include $(shell find $(O) -name '*.d' -type f 2>/dev/null)
