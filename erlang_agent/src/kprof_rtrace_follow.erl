%%% @doc Following a request's messages into the processes they reach, on
%%% this node and on others, for kprof_rtrace's server; and the flags of
%%% the processes reached, which go when no request can reach them any more.
%%%
%%% == On this node ==
%%% kprof_rtrace_own labels the traced process's seq_trace token, and a
%%% send pattern (follow_spec/3) gives a receiver the flags at the send.
%%% The send pattern applies to every process with the send flag, which only
%%% kprof's traced processes have. For a message that carries a seq_trace
%%% token, its trace/3 gives the receiver kprof_rtrace_flags:follow_flags/0
%%% at the send (before the receiver can take the message in) with the
%%% sender's tracer, the NIF.
%%% The token's label ({kprof, N}, set by kprof:trace_begin/1, with its
%%% `receive' flag) says which request the message is for, and the NIF, the
%%% node's system seq tracer meanwhile, learns from seq_trace's `receive'
%%% event when the receiver takes it in: the collector gives the receiver's
%%% time to that trace from there until the receiver is back in its receive
%%% loop (any process, OTP behaviour or not: see kprof_tracer.c), for at
%%% most `max_processes' processes per trace. Left out: this server, remote
%%% processes, and those another tracer traced when the pattern was set
%%% (trace/3 would take them from it): past ?MAX_FOREIGN of those, when
%%% someone has a send pattern, or when the system seq tracer is someone
%%% else's, nothing is followed. Only through the NIF: the trace port has no
%%% seq_trace events. In kprof's own session (OTP 27 and later) no process
%%% is another tracer's.
%%%
%%% The collector asks the server to clear the flags of a trace's processes
%%% at its end, but those following reached keep them until no trace runs
%%% (add_reached/2 says why).
%%%
%%% == Across nodes ==
%%% A request's token crosses distribution by itself. While traces here
%%% follow their messages, this server tells every other node where the
%%% kprof application is to listen (kprof_rtrace:listen/1, again every
%%% ?LISTEN_MS div 2). A listening node arms what a trace arms (its
%%% collector and tracer NIF too) and a meta pattern on the callbacks of
%%% every loaded gen_server (?CALLBACKS): a process that calls one with a
%%% token gets the follow flags there and then (the pattern's trace/3), and
%%% the NIF learns from the meta event, which carries the token, that it
%%% took in a message of the trace the token's label names; its stretch ends
%%% when the callback returns. The listening node's collector sends its part
%%% (its processes' stacks and times, in its clock) through its server to
%%% this one, which gives it to this node's collector with the offset
%%% between the two clocks (see clock/1); the trace is written with every
%%% part.
-module(kprof_rtrace_follow).

-export([arm_follow/1, following/1, add_reached/2, untrace_reached/1, quiet/1,
         listen_on/1, arm_listen/1, listen_check/1, listen_tick/1, part_out/4, part_in/4]).

-include("kprof_rtrace.hrl").

-define(MAX_REACHED, 100000).
%% Other nodes listen this long after the last {listen, Origin}; it comes
%% every ?LISTEN_MS div 2 while traces here follow.
-define(LISTEN_MS, 10000).
%% How long a node's clock offset, measured for a part, is used again.
-define(CLOCK_MS, 10000).
-define(CALLBACKS, [{handle_call, 3}, {handle_cast, 2}, {handle_info, 2}]).

%% @doc The send pattern that follows a request's messages, once patterns
%% are armed and events go through the NIF (which may come after the first
%% trace armed them: the collector connects it then); see follow_spec/3.
-spec arm_follow(#state{}) -> #state{}.
arm_follow(S = #state{armed = true, nif = true, owned = {Set, OnLoad, false}, guard = Guard,
                      session = Session}) ->
    case kprof_tracing:tracer(Session) =:= ?NIF
        andalso kprof_tracing:info(Session, send, match_spec) =:= {match_spec, true}
        andalso seq_trace:get_system_tracer() =:= false
        andalso follow_spec(self(), Session, S#state.port) of
        false ->
            S;
        Spec ->
            Owned = {Set, OnLoad, true},
            Guard ! {owned, Session, Owned, kprof_rtrace_guard:metas(S)},
            _ = seq_trace:set_system_tracer(?NIF),
            _ = kprof_tracing:send(Session, Spec),
            S#state{owned = Owned}
    end;
arm_follow(S) ->
    S.

%% The send pattern (see the module's doc), or false when nothing can be
%% followed.
follow_spec(Server, Session, Port) ->
    Foreign = kprof_rtrace_flags:foreign_processes(Session, Port),
    case length(Foreign) > ?MAX_FOREIGN of
        true -> false;
        false ->
            %% a local pid, or a registered name (`Name ! Msg')
            Names = [N || P <- Foreign, {registered_name, N} <- [process_info(P, registered_name)]],
            Left = [{'=/=', '$1', X} || X <- [Server, kprof_rtrace | Foreign ++ Names]],
            %% the tracer named: unnamed, the action takes the sender's,
            %% which is none while another process clears its flags (the
            %% collector's untrace of a --mfa call's process as it sends):
            %% OTP 25 then crashes in trace_send
            Flags = kprof_tracing:action_flags(Session, kprof_rtrace_flags:follow_flags()),
            Body = [{trace, '$1', [], Flags}, {message, {get_seq_token}}],
            %% to another node (a pid, or {Name, Node}): only said, for
            %% the trace to wait for that node's part
            Said = [{message, {get_seq_token}}],
            [{['$1', '_'], [{is_pid, '$1'}, {'=:=', {node, '$1'}, {node}}, {is_seq_trace} | Left],
              Body},
             {['$1', '_'], [{is_atom, '$1'}, {is_seq_trace} | Left], Body},
             {['$1', '_'], [{is_pid, '$1'}, {is_seq_trace}], Said},
             {['$1', '_'], [{is_tuple, '$1'}, {is_seq_trace}], Said}]
    end.

%% @doc Whether new traces follow their messages: the send pattern is set
%% and events go through the NIF.
-spec following(#state{}) -> boolean().
following(#state{nif = Nif, owned = {_, _, Follow}}) -> Nif andalso Follow.

%% @doc The processes following reached (the collector lists them, `all'
%% past ?MAX_REACHED) keep the flags the send pattern gave them until no
%% trace runs and no calls were followed (`--mfa''s traces are the
%% collector's, and may wait for a process they reached to take in their
%% message: the processes they reached keep their flags until kprof
%% stops): only then can no request's message be on its way to one of
%% them, giving it the flags anew while they are taken away. Not longer: an
%% idle followed process's calls each cost it the VM's call tracing and the
%% NIF's enabled/3 (kept until the next trace, three servers added 30 us to
%% each request, tests/bench/rtrace_overhead).
-spec add_reached([pid()] | all, #state{}) -> #state{}.
add_reached(_, S = #state{reached = all}) -> S;
add_reached(all, S) -> S#state{reached = all};
add_reached(Pids, S = #state{reached = R}) ->
    case length(R) + length(Pids) > ?MAX_REACHED of
        true -> S#state{reached = all};
        false -> S#state{reached = Pids ++ R}
    end.

%% @doc The reached processes lose their flags, when no trace runs, no
%% calls were followed and no begin with the ticket is in flight (see
%% add_reached/2).
-spec untrace_reached(#state{}) -> #state{}.
untrace_reached(S0 = #state{traces = Traces, reached = R, calls = [], calls_followed = false})
  when map_size(Traces) =:= 0, R =/= [] ->
    case kprof_rtrace_arming:settled(S0) of
        {true, S = #state{port = Port, session = Session}} ->
            _ = case R of
                    all -> kprof_rtrace_flags:untrace_all(Session, Port);
                    _ -> [kprof_rtrace_flags:untrace(P, Session, Port) || P <- R, is_pid(P)]
                end,
            S#state{reached = []};
        {false, S} ->
            S
    end;
untrace_reached(S) ->
    S.

%% @doc Tracing went quiet (the patterns' linger ended): what following
%% left goes, the tokens of followed requests in the servers they reached
%% and the flags of processes it reached that the collector could not name
%% (a SEND it lost). One pass over the processes: never on a request's path
%% (with `linger_ms' 0, the patterns go at each trace's end_trace/1; then
%% this waits for kprof_rtrace_guard:shutdown/1).
-spec quiet(#state{}) -> #state{}.
quiet(S = #state{owned = {_, _, true}, port = Port, session = Session}) ->
    kprof_tiers:clear_tokens(),
    kprof_rtrace_flags:untrace_all(Session, Port),
    S;
quiet(S) ->
    S.

%%% ---------------------------------------------------------------------
%%% Across nodes

%% @doc Another node's traces follow: listen until ?LISTEN_MS from now.
-spec listen_on(#state{}) -> #state{}.
listen_on(S = #state{listen_until = Until}) ->
    Now = erlang:monotonic_time(millisecond),
    Until =:= 0 andalso erlang:send_after(?LISTEN_MS, self(), listen_check),
    arm_listen(S#state{listen_until = Now + ?LISTEN_MS}).

listening(#state{listen_until = Until}) -> Until =/= 0.

%% @doc Arms listening once the NIF serves (it is the meta tracer and the
%% system seq tracer); until then, nothing.
-spec arm_listen(#state{}) -> #state{}.
arm_listen(S = #state{nif = true, listened = []}) ->
    case listening(S) of
        false -> S;
        true ->
            S1 = #state{session = Session} = kprof_rtrace_arming:arm(S),
            listen_armed(S1, Session)
    end;
arm_listen(S) ->
    S.

%% Listening's meta patterns begin traces: once the BIFs are off
%% (kprof_rtrace's armed_fully/2 comes back to arm_listen/1).
listen_armed(S1, Session) ->
    case kprof_rtrace_arming:busy(S1#state.arming) of
        true -> S1;
        false ->
            Flags = kprof_tracing:action_flags(Session, kprof_rtrace_flags:follow_flags()),
            MS = [{'_', [{is_seq_trace}],
                   [{trace, [], Flags}, {message, {get_seq_token}}, {return_trace}]}],
            %% a meta pattern someone else set stays theirs (a function
            %% with none answers {meta, []} once the local patterns are set)
            MFAs = [{M, F, A} || M <- erlang:loaded(), {F, A} <- ?CALLBACKS,
                                 erlang:function_exported(M, F, A),
                                 kprof_tracing:info(Session, {M, F, A}, meta_match_spec) =:=
                                     {meta_match_spec, false}],
            S2 = kprof_rtrace_guard:tell_guard(S1#state{listened = MFAs}),
            _ = [kprof_tracing:function(Session, MFA, MS, [meta]) || MFA <- MFAs],
            S2
    end.

%% @doc Past the last listen/1 by ?LISTEN_MS: the meta patterns go, and the
%% rest with the last trace here.
-spec listen_check(#state{}) -> #state{}.
listen_check(S = #state{listen_until = Until}) ->
    Now = erlang:monotonic_time(millisecond),
    case Now >= Until of
        false ->
            erlang:send_after(Until - Now, self(), listen_check),
            S;
        true ->
            _ = [kprof_rtrace_guard:stop_meta(MFA, S#state.session, S#state.port)
                 || MFA <- S#state.listened],
            kprof_rtrace_arming:release_idle(
              kprof_rtrace_guard:tell_guard(S#state{listen_until = 0, listened = []}))
    end.

%% @doc While traces here follow (running, or ended less than ?LISTEN_MS
%% div 2 ago): the other nodes where kprof is listen. Only this node's own
%% traces count: two nodes that listen to each other would keep each other
%% listening. Asked from a process of its own: a node that does not answer
%% holds up nothing.
-spec listen_tick(#state{}) -> #state{}.
listen_tick(S = #state{ticking = false, last_trace = Last}) ->
    Recent = maps:size(S#state.traces) > 0 orelse
        erlang:monotonic_time(millisecond) - Last < ?LISTEN_MS div 2,
    case Recent andalso following(S) of
        true ->
            Origin = node(),
            _ = spawn(fun() -> tell_nodes(Origin) end),
            erlang:send_after(?LISTEN_MS div 2, self(), listen_tick),
            S#state{ticking = true};
        false ->
            S
    end;
listen_tick(S) ->
    S.

tell_nodes(Origin) ->
    [erpc:cast(N, kprof_rtrace, listen, [Origin])
     || N <- nodes(),
        (try erpc:call(N, code, ensure_loaded, [kprof_rtrace], 2000) catch _:_ -> error end)
            =:= {module, kprof_rtrace}],
    ok.

%% @doc This node's part `Part' of trace `No' of node `Origin''s, from the
%% collector: to Origin's server.
-spec part_out(term(), node(), term(), #state{}) -> #state{}.
part_out(No, Origin, Part, S) ->
    erlang:send({kprof_rtrace, Origin}, {rtrace_part, No, node(), Part}, [noconnect]),
    S.

%% @doc Node `From''s part of trace `No': to the collector, with the offset
%% of From's clock to this node's (measured in a process of its own, and
%% kept ?CLOCK_MS).
-spec part_in(term(), node(), term(), #state{}) -> #state{}.
part_in(_, _, _, S = #state{collector_pid = undefined}) ->
    S;
part_in(No, From, Part, S = #state{collector_pid = Collector, clocks = Clocks}) ->
    Now = erlang:monotonic_time(millisecond),
    Kept = case Clocks of
               #{From := {Offset, Error, At}} when Now - At < ?CLOCK_MS -> {Offset, Error};
               _ -> none
           end,
    Server = self(),
    _ = spawn(fun() ->
                      {Offset1, Error1} = case Kept of
                                              none -> clock(From);
                                              _ -> Kept
                                          end,
                      Kept =:= none andalso (Server ! {clock, From, Offset1, Error1, Now}),
                      Collector ! {rtrace_part, No, From, Part, Offset1, Error1}
              end),
    S.

%% {Offset, Error}: node `Node''s monotonic time minus this node's, in ns,
%% within +-Error: the best of three round trips (half of the shortest).
clock(Node) ->
    Rounds = [begin
                  T0 = erlang:monotonic_time(nanosecond),
                  Remote = try erpc:call(Node, erlang, monotonic_time, [nanosecond], 1000)
                           catch _:_ -> undefined end,
                  T1 = erlang:monotonic_time(nanosecond),
                  {T1 - T0, Remote, T0}
              end || _ <- [1, 2, 3]],
    case lists:sort([R || R = {_, Remote, _} <- Rounds, is_integer(Remote)]) of
        [{Rtt, Remote, T0} | _] -> {Remote - (T0 + Rtt div 2), Rtt div 2};
        [] -> {0, 0}
    end.
