%%% @doc Markers of single-request traces. They do nothing; while a request
%%% trace runs, kprof_rtrace puts patterns on them that copy their argument
%%% into the trace stream, so the collector learns where a trace begins and
%%% ends, in the order of the process's own events.
-module(kprof_rtrace_mark).

-export([begin_trace/1, end_trace/1]).

%% @doc `{Id, Bounds}': the traced process's first event.
-spec begin_trace({binary(), kprof_rtrace:bounds()}) -> ok.
begin_trace(_IdAndBounds) ->
    ok.

%% @doc The traced process's last event (`Id'), or `{Id, Why}' from
%% kprof_rtrace when it cuts a trace.
-spec end_trace(binary() | {binary(), atom()}) -> ok.
end_trace(_Id) ->
    ok.
