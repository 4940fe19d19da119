%%% @doc The bounds of request traces, and where each is kept:
%%% <ul>
%%% <li>concurrent traces, `max_concurrent': a begin past it is refused
%%%   (admit/4; a begin with the ticket counts itself against it,
%%%   kprof_rtrace_ticket:take/2);</li>
%%% <li>the rate, `rate_limit' (per second; the HTTP toggles ask for one):
%%%   a begin that asks for it takes a token from a bucket that holds
%%%   `rate_limit' tokens (at least one) and refills at that rate; with
%%%   none left it is refused (admit/4, kprof_rtrace_rate: one bucket,
%%%   which a begin with the ticket takes its token from without a
%%%   call);</li>
%%% <li>duration, `max_duration_ms': a timer in kprof_rtrace's server stops
%%%   the trace, and the request goes on untraced
%%%   (kprof_rtrace_traces);</li>
%%% <li>events, `max_events': counted by the collector, which cuts the
%%%   trace;</li>
%%% <li>processes a request's messages reach, `max_processes', per trace:
%%%   none followed at 0 (kprof_rtrace_traces:new_trace/3), and the
%%%   collector follows no more;</li>
%%% <li>the node's trace queue, `max_backlog_mb': past it every running
%%%   trace is cut (watch/1).</li>
%%% </ul>
%%% Past a bound the trace's file ends with a marker frame. (`slower_than_ms'
%%% bounds no trace: the collector writes only those that took that long.)
-module(kprof_rtrace_bounds).

-export([admit/4, watch/1]).

-include("kprof_rtrace.hrl").

%% @doc Whether a begin with `Settings' (merged with the call's `Options')
%% may go while the server holds `Traces': not past `max_concurrent', and
%% only a caller that asks for it is rate limited (not the settings), by
%% the server's bucket.
-spec admit(#{binary() => term()}, kprof_rtrace:settings(), map(), kprof_rtrace_rate:bucket()) ->
          ok | {error, busy | rate_limited}.
admit(Traces, Settings, Options, Bucket) ->
    case maps:size(Traces) >= maps:get(max_concurrent, Settings) of
        true ->
            {error, busy};
        false ->
            case kprof_rtrace_rate:allowed(Bucket, Options) of
                false -> {error, rate_limited};
                true -> ok
            end
    end.

%% @doc `watch' came. The node's side of the trace port has no bound of its
%% own: a traced process that emits events faster than they leave makes
%% the port's queues (driver and port-task memory) grow. While traces run,
%% the system memory is checked every ?WATCH_MS; past `max_backlog_mb'
%% above what it was when tracing began, every running trace is cut: its
%% processes stop emitting, and a mark sent by the server tells the
%% collector (behind the queued events) to close it as cut.
-spec watch(#state{}) -> #state{}.
watch(S = #state{armed = false}) ->
    S;
watch(S0) ->
    S = #state{baseline = Base, settings = Settings, traces = Traces} =
        kprof_rtrace_collector:flush(S0),
    erlang:send_after(?WATCH_MS, self(), watch),
    Limit = maps:get(max_backlog_mb, Settings) * 1048576,
    case erlang:memory(system) - Base > Limit of
        false ->
            S;
        true ->
            kprof_rtrace_flags:untrace_all(S#state.session, S#state.port),
            Ids = maps:keys(Traces),
            S1 = kprof_rtrace_traces:cut_marks(S, Ids, node_backlog),
            logger:warning("kprof: request traces cut: the node's trace queue grew past ~p MB",
                           [maps:get(max_backlog_mb, Settings)]),
            lists:foldl(fun kprof_rtrace_traces:finish/2, S1, Ids)
    end.
