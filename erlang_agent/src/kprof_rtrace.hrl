%%% The state of kprof_rtrace's server, which the modules of its concerns
%%% (kprof_rtrace's module doc names them) take and give back, and the
%%% constants more than one of them reads. Included by those modules only:
%%% nothing outside the server sees the record.

%% The tracer NIF, as a session's, a process's and the system seq tracer.
-define(NIF, {kprof_tracer, []}).
%% While traces run, how often the node's memory is watched
%% (kprof_rtrace_bounds:watch/1); also how often, and how soon after a
%% trace's end, the NIF's buffer is flushed (kprof_rtrace_collector).
-define(WATCH_MS, 20).
%% While patterns are armed that take no module loaded later by themselves,
%% how often modules loaded since are looked for
%% (kprof_rtrace_arming:arm_loaded/2).
-define(LOADED_MS, 500).
%% Past this many processes traced by another tracer, `--mfa' refuses and
%% no request's messages are followed: each is excluded by a guard in the
%% match spec (kprof_rtrace_calls, kprof_rtrace_follow:follow_spec/3).
-define(MAX_FOREIGN, 1000).
%% What kprof set in the node when it set nothing (kprof_rtrace_guard:owned()).
-define(NOTHING_OWNED, {{[], []}, false, false}).

-record(trace, {id :: binary(), root :: pid(), timer :: reference(), pids = [] :: [pid()]}).
-record(state, {port :: port(), tcp_port :: inet:port_number(),
                settings :: kprof_rtrace:settings(),
                collector :: port() | undefined, traces = #{} :: #{binary() => #trace{}},
                armed = false :: boolean(), seq = 0 :: non_neg_integer(),
                bucket :: kprof_rtrace_rate:bucket(), % of `rate_limit'
                calls = [] :: [mfa()],           % traced by kprof_rtrace:trace_calls/2
                %% calls were followed: their traces, the collector's, may
                %% wait for the processes they reached (see
                %% kprof_rtrace_follow:add_reached/2)
                calls_followed = false :: boolean(),
                baseline = 0 :: non_neg_integer(), % system memory when armed
                nif = false :: boolean(),          % kprof_tracer is connected
                %% a flush is due (kprof_rtrace_collector:flush_soon/1, a retry)
                flush_timer = false :: boolean(),
                guard :: pid(),                    % undoes `owned' if this server dies
                %% the local patterns kprof set
                owned = ?NOTHING_OWNED :: kprof_rtrace_guard:owned(),
                %% where its flags and patterns are: open while armed
                session :: kprof_tracing:session(),
                %% armed, no trace: until when the patterns stay (monotonic
                %% ms), see kprof_rtrace_arming:release/1; and the one
                %% linger message on its way
                linger :: integer() | undefined,
                linger_timer :: reference() | undefined,
                reached = [] :: [pid()] | all,     % see kprof_rtrace_follow:add_reached/2
                %% the collector's pid, for the parts other nodes send
                collector_pid :: pid() | undefined,
                %% listening (see kprof_rtrace:listen/1): until when
                %% (monotonic ms; 0: not), and the meta patterns it set on
                %% the servers' callbacks
                listen_until = 0 :: integer(),
                listened = [] :: [mfa()],
                ticking = false :: boolean(),      % listen_tick is due
                last_trace = 0 :: integer(),       % when a trace here last ended, ms
                clocks = #{} :: #{node() => {integer(), non_neg_integer(), integer()}},
                %% see kprof_rtrace_arming's bifs/1
                bifs :: [mfa()] | undefined,
                first :: kprof_rtrace_first:held(),    % traces waiting for the NIF
                %% traces waiting for the BIFs' patterns to go
                arming = kprof_rtrace_arming:new() :: kprof_rtrace_arming:arming(),
                %% begins without a call (kprof_rtrace_ticket), and since
                %% when one is in flight while the server waits to settle
                ticket :: kprof_rtrace_ticket:ticket(),
                unsettled :: {integer(), Due :: boolean()} | undefined,
                %% armed: the modules loaded when last looked for, with
                %% the settings armed with (kprof_rtrace_arming:arm_loaded/2)
                loaded :: {reference(), #{module() => []}, OtpCalls :: boolean(),
                           Bifs :: boolean()} | undefined,
                %% see kprof_rtrace_collector:line/2
                told_files = false :: boolean()}).
