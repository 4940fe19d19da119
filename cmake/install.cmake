# What `cmake --install` puts where, and the Debian package made of it
# (scripts/package: cpack -G DEB).
#
#   PREFIX/bin/kprof                                 the program
#   PREFIX/lib/erlang/lib/kprof-VSN/{ebin,priv}      the kprof application
#   PREFIX/lib/systemd/system/kprof-push@.service    kprof push, a service per node
#   PREFIX/share/doc/kprof/fleet.md, examples/push.env  how to set it up
#
# With PREFIX /usr, as the package installs, the application is in Debian's
# Erlang root (/usr/lib/erlang/lib), where every node of the host's Erlang
# finds it with nothing set: `application:load(kprof)`. Elsewhere,
# ERL_LIBS=PREFIX/lib/erlang/lib. The program needs none of it (it carries
# the agent and the NIF); a release takes kprof as a dependency instead
# (erlang_agent/rebar.config, mix.exs).

set(KPROF_APP_INSTALL_DIR lib/erlang/lib/kprof-${PROJECT_VERSION})
install(TARGETS kprof RUNTIME DESTINATION bin)
install(FILES ${AGENT_BEAMS} ${AGENT_EBIN}/kprof.app DESTINATION ${KPROF_APP_INSTALL_DIR}/ebin)
install(TARGETS kprof_tracer LIBRARY DESTINATION ${KPROF_APP_INSTALL_DIR}/priv)
install(FILES sampler/push/kprof-push@.service DESTINATION lib/systemd/system)
install(FILES docs/fleet.md DESTINATION share/doc/kprof)
install(FILES sampler/push/push.env DESTINATION share/doc/kprof/examples)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kprof)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "kprof developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "profiler for Erlang/BEAM nodes in production")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "kprof attaches to a running Erlang node by name and shows where its CPU,\n time and memory go (perf-script for FlameScope, folded stacks, flame\n graphs, an HTML report, a live top), how long each layer of its requests\n takes, and what one request did. It carries the agent it loads into the\n node; the node needs no preparation.")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # kprof_VERSION_ARCH.deb
# Depends: the packages of the shared libraries the program links
# (dpkg-shlibdeps), and nothing else: no compiler, no -dev package, no
# Erlang (the node brings its own)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
include(CPack)
