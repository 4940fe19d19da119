%%% @doc The traces kprof_rtrace's server holds: how one begins and how it
%%% ends.
%%%
%%% A begin (begin_trace/4, from kprof_rtrace:begin_trace/3) is refused past
%%% a bound (kprof_rtrace_bounds:admit/4) or when another tracer traces the
%%% process; else it arms the patterns (kprof_rtrace_arming) and waits, held,
%%% while the BIFs' patterns go; then the trace gets its id, its bounds for
%%% the collector and its process's flags (new_trace/3), set by the server
%%% or, `By' `self', by the process itself (kprof_rtrace_own). A begin with
%%% the ticket makes new_trace/3 in its own process and tells the server
%%% after the fact, or not at all until its end (begun/4, run_timeout/3;
%%% kprof_rtrace_ticket).
%%%
%%% The server holds each trace with the timer of its `max_duration_ms'.
%%% A trace ends by its process's end (kprof_rtrace:end_trace/1, or ended/2
%%% once the process cleared its own flags), by its timer (the request goes
%%% on untraced), or cut (cut_marks/3); finish/3 clears its process's flags,
%%% and the collector asks the server to clear those of the trace's other
%%% processes. When the last ends, the patterns linger, then go
%%% (kprof_rtrace_arming:release_idle/1).
%%%
%%% This module has no call pattern while traces run (it is among
%%% kprof_rtrace_patterns' ?OWN, as kprof_rtrace is): new_trace/3 runs in
%%% the process that begins a trace, which a followed request may have
%%% traced already, and the server is traced itself while it makes the cut
%%% marks.
-module(kprof_rtrace_traces).

-export([begin_trace/4, begin_own/2, new_trace/3, begun/4, finish/2, finish/3, run_timeout/3,
         cut_marks/3]).

-include("kprof_rtrace.hrl").

-define(MAX_NO, 16#7ffffffe).

%% @doc Begins a trace of `Pid' with the settings `S' holds merged with
%% `Options'. `By': who sets the process's flags, the server or the
%% process itself (given them in the reply). `hold': the trace waits for
%% the BIFs' patterns to go (kprof_rtrace_arming).
-spec begin_trace(pid(), map(), server | self, #state{}) -> {term(), #state{}}.
begin_trace(Pid, Options, By, S = #state{traces = Traces}) ->
    Settings = maps:merge(S#state.settings, Options),
    case kprof_rtrace_bounds:admit(Traces, Settings, Options, S#state.bucket) of
        {error, _} = Error ->
            {Error, S};
        ok ->
            case kprof_rtrace_flags:foreign_tracer(Pid, S#state.session, S#state.port) of
                false -> start_trace(Pid, By, Settings, S);
                Tracer -> {{error, {traced_by_another_tracer, Tracer}}, S}
            end
    end.

start_trace(Pid, By, Settings, S) ->
    S1 = kprof_rtrace_arming:arm(kprof_rtrace_arming:arming_settings(Settings, S)),
    case kprof_rtrace_arming:busy(S1#state.arming) of
        true -> {hold, S1};
        false -> start_armed(Pid, By, Settings, S1)
    end.

start_armed(Pid, By, Settings, S1 = #state{traces = Traces}) ->
    Seq = S1#state.seq + 1,
    {Id, Bounds, Flags} = new_trace(Seq, kprof_rtrace_follow:following(S1), Settings),
    case By =:= self orelse kprof_tracing:process(S1#state.session, Pid, true, Flags) =:= 1 of
        true ->
            Timer = erlang:send_after(maps:get(max_duration_ms, Settings), self(),
                                      {timeout, Id}),
            T = #trace{id = Id, root = Pid, timer = Timer},
            {{ok, Id, Bounds, {S1#state.session, Flags, S1#state.port}},
             kprof_rtrace_follow:listen_tick(S1#state{seq = Seq, traces = Traces#{Id => T}})};
        %% gone, or traced by another tracer since the check
        false ->
            {{error, cannot_trace_process}, kprof_rtrace_arming:release_idle(S1)}
    end.

%% @doc In the process that begins a trace (kprof_rtrace:begin_own/1), with
%% the ticket, `Settings' those of the call's `Options': a trace whose
%% messages are followed tells the server by a message ({begun, ...}, see
%% begun/4), one that is not tells it nothing until its end (the run,
%% kprof_rtrace_ticket:run/4). `none': no ticket, or `max_concurrent'
%% traces run (the call to the server then says why).
-spec begin_own(kprof_rtrace:settings(), map()) ->
          {ok, binary(), kprof_rtrace:bounds(),
           {kprof_tracing:session(), [atom()], port() | undefined},
           kprof_rtrace_ticket:run() | undefined}
          | {error, rate_limited} | none.
begin_own(Settings, Options) ->
    case kprof_rtrace_ticket:take(maps:get(max_concurrent, Settings), Options) of
        {ok, Server, {Session, Port, Following}, Counters} ->
            {Id, Bounds, Flags} = new_trace(erlang:unique_integer([positive]), Following, Settings),
            Ms = maps:get(max_duration_ms, Settings),
            Run = case Bounds of
                      #{follow := _} ->
                          Server ! {begun, Id, self(), Ms},
                          undefined;
                      _ ->
                          kprof_rtrace_ticket:run(Counters, Server, Id, Ms)
                  end,
            {ok, Id, Bounds, {Session, Flags, Port}, Run};
        rate_limited ->
            {error, rate_limited};
        none ->
            none
    end.

%% @doc A new trace's id, its bounds for the collector and its process's
%% flags: its messages followed when `Following' (the send pattern is set)
%% and `max_processes' allows any.
-spec new_trace(non_neg_integer(), boolean(), kprof_rtrace:settings()) ->
          {binary(), kprof_rtrace:bounds(), [atom()]}.
new_trace(Seq, Following, Settings) ->
    Follow = Following andalso maps:get(max_processes, Settings) > 0,
    Bounds = slower_than(Settings,
                         maps:with([max_events, max_duration_ms, max_processes, name], Settings)),
    %% the label's N: unique in the cluster, as a request's token carries
    %% it to other nodes, whose own traces have theirs
    No = erlang:phash2({node(), Seq, erlang:unique_integer()}, ?MAX_NO) + 1,
    {trace_id(Seq), if Follow -> Bounds#{follow => No}; true -> Bounds end,
     kprof_rtrace_flags:flags() ++ [send || Follow]}.

%% Ids: time-based and unique, never from request data: in base 36, the
%% Unix time in seconds, then 4 digits of the sequence and 5 random ones,
%% made as one number so that one conversion writes them all, zeros
%% included (1 us here, where three conversions and their padding took
%% 2.3; io_lib 6), on the path of every traced request.
trace_id(Seq) ->
    Rand = erlang:phash2({node(), erlang:unique_integer(), erlang:system_time()}, 1 bsl 24),
    %% 36^4 and 36^5
    integer_to_binary((erlang:system_time(second) * 1679616 + Seq rem 1679616) * 60466176 + Rand,
                      36).

%% `slower_than_ms' as the collector reads it, in the bounds.
slower_than(#{slower_than_ms := Ms}, Bounds) when is_integer(Ms), Ms > 0 ->
    Bounds#{slower_than_us => Ms * 1000};
slower_than(_, Bounds) ->
    Bounds.

%% @doc A trace begun with the ticket: the server holds it as if it had
%% begun it (its duration's timer; the patterns stay). A wait to settle
%% starts afresh: this begin is in, one still in flight is newer.
-spec begun(binary(), pid(), pos_integer(), #state{}) -> #state{}.
begun(Id, Pid, Ms, S = #state{traces = Traces}) ->
    Timer = erlang:send_after(Ms, self(), {timeout, Id}),
    Traces1 = Traces#{Id => #trace{id = Id, root = Pid, timer = Timer}},
    kprof_rtrace_follow:listen_tick(
      S#state{traces = Traces1, linger = undefined, unsettled = undefined,
              ticket = kprof_rtrace_ticket:registered(map_size(Traces1), S#state.ticket)}).

%% @doc Ends trace `Id' and clears its process's flags.
-spec finish(binary(), #state{}) -> #state{}.
finish(Id, S) ->
    finish(Id, true, S).

%% @doc Ends trace `Id'. `UntraceRoot': false when the trace's process
%% cleared its own flags (clearing them here would wait for it to be
%% scheduled out).
-spec finish(binary(), boolean(), #state{}) -> #state{}.
finish(Id, UntraceRoot, S0 = #state{traces = Traces}) ->
    S = case maps:take(Id, Traces) of
            {#trace{root = Root, timer = Timer}, Rest} ->
                _ = erlang:cancel_timer(Timer),
                _ = UntraceRoot andalso
                    kprof_rtrace_flags:untrace(Root, S0#state.session, S0#state.port),
                S0#state{traces = Rest};
            error -> % begun with no message (or ended already): what an end needs
                S0
        end,
    Now = erlang:monotonic_time(millisecond),
    kprof_rtrace_arming:release_idle(
      kprof_rtrace_follow:untrace_reached(
        kprof_rtrace_collector:flush_soon(S#state{last_trace = Now}))).

%% @doc The duration of trace `Id', begun with no message, is over: its
%% count is this server's to end, and its process, if still in it, loses
%% its flags (as finish/3 clears a held trace's root); the collector cuts
%% it.
-spec run_timeout(binary(), pid(), #state{}) -> #state{}.
run_timeout(Id, Pid, S = #state{session = Session, port = Port}) ->
    _ = kprof_rtrace_own:running(Pid) =:= Id andalso kprof_rtrace_flags:untrace(Pid, Session, Port),
    finish(Id, false, S#state{ticket = kprof_rtrace_ticket:timed_out(S#state.ticket)}).

%% @doc Tells the collector, behind the events queued, to close traces
%% `Ids' as cut for `Why' (kprof_rtrace_mark:end_trace/1). The marks come
%% from this process, traced for the moment it makes them.
-spec cut_marks(#state{}, [binary()], atom()) -> #state{}.
cut_marks(S = #state{session = Session}, Ids, Why) ->
    _ = kprof_tracing:process(Session, self(), true, [call]),
    [kprof_rtrace_mark:end_trace({Id, Why}) || Id <- Ids],
    _ = kprof_tracing:process(Session, self(), false, [call]),
    kprof_rtrace_collector:flush(S).
