// One renderer for every chart: it reads a query's @chart spec and its REST rows.
const PolyCharts = (() => {
  function column(data, name) {
    const i = data.columns.indexOf(name);
    return data.rows.map(r => r[i]);
  }
  function traces(spec, data) {
    const x = column(data, spec.x);
    const type = spec.kind === "bar" ? "bar" : "scatter";
    return (spec.y || []).map(y => ({x, y: column(data, y), name: y, type, mode: "lines+markers"}));
  }
  async function load(query, params, el) {
    const url = "/api/queries/" + query.name + "?" + new URLSearchParams(params);
    const data = await (await fetch(url)).json();
    if (!data.ok) { el.textContent = data.error; return; }
    const layout = {xaxis: {title: {text: query.chart.xlabel || query.chart.x}},
                    yaxis: {title: {text: query.chart.ylabel || ""}}, margin: {t: 20}};
    Plotly.newPlot(el, traces(query.chart, data), layout, {responsive: true});
  }
  return {load, traces};
})();
