// The Node libraries of issue 35 used as an application uses them, against the gateway at URL; what each returned
// is printed as one JSON line for tests/apps/test_node_clients.py to check.
//
//   node clients.mjs search <8|9> URL QUERY      the client's helpers.search
//   node clients.mjs scroll <8|9> URL QUERY      helpers.scrollDocuments, and helpers.scrollSearch's pages
//   node clients.mjs searchkit URL QUERY         @searchkit/api's default query, facets and a sort index
import { Client as Client9 } from '@elastic/elasticsearch'
import { Client as Client8 } from '@elastic/elasticsearch-8'
import Searchkit from '@searchkit/api'

const INDEX = 'esrr-docs'
const [scenario, ...args] = process.argv.slice(2)

function client (major, url) {
  const Client = { 8: Client8, 9: Client9 }[major]
  if (Client === undefined) throw new Error(`no client of major version ${major}`)
  return new Client({ node: url })
}

async function search (major, url, query) {
  const documents = await client(major, url).helpers.search({ index: INDEX, query: { match: { text: query } } })
  return { ids: documents.map((doc) => doc._id), titles: documents.map((doc) => doc.title) }
}

async function scroll (major, url, query) {
  const es = client(major, url)
  const ids = []
  for await (const doc of es.helpers.scrollDocuments({ index: INDEX, query: { match: { text: query } } })) {
    ids.push(doc.doc_id)  // scrollDocuments yields each _source alone
  }
  let pages = 0
  let paged = 0
  for await (const page of es.helpers.scrollSearch({ index: INDEX, query: { match: { text: query } }, size: 10 })) {
    pages += 1
    paged += page.documents.length
  }
  return { ids, pages, paged }
}

// Searchkit posts to /_msearch with the global fetch: each exchange is kept as it went (the library is not changed).
function tapFetch () {
  const exchanges = []
  const fetched = globalThis.fetch
  globalThis.fetch = async (resource, options) => {
    const response = await fetched(resource, options)
    exchanges.push({ url: String(resource), body: options.body, answer: await response.clone().json() })
    return response
  }
  return exchanges
}

async function searchkit (url, query) {
  const exchanges = tapFetch()
  const api = Searchkit({
    connection: { host: url },
    search_settings: {
      search_attributes: [{ field: 'title', weight: 3 }, 'abstract'],
      result_attributes: ['title', 'abstract', 'year', 'journal'],
      highlight_attributes: ['title'],
      facet_attributes: [
        { attribute: 'publication_types', field: 'publication_types', type: 'string' },
        { attribute: 'journal', field: 'journal', type: 'string' },
        { attribute: 'year', field: 'year', type: 'numeric' }
      ],
      sorting: {
        default: { field: '_score', order: 'desc' },
        _year_desc: { field: 'year', order: 'desc' }
      }
    }
  })
  const facets = ['publication_types', 'journal', 'year']
  const first = await api.handleRequest([{ indexName: INDEX, params: { query, facets, hitsPerPage: 10, page: 0 } }])
  const refined = await api.handleRequest([
    { indexName: INDEX, params: { query, facets, facetFilters: [['publication_types:Review']], hitsPerPage: 10 } }
  ])
  const newest = await api.handleRequest([{ indexName: `${INDEX}_year_desc`, params: { query, hitsPerPage: 10 } }])
  const results = (answer) => answer.results.map((result) => ({
    nbHits: result.nbHits,
    ids: result.hits.map((hit) => hit.objectID),
    years: result.hits.map((hit) => hit.year),
    titles: result.hits.map((hit) => hit.title),
    highlighted: result.hits.map((hit) => hit._highlightResult?.title?.value ?? null),
    facets: result.facets,
    facets_stats: result.facets_stats
  }))
  return {
    first: results(first),
    refined: results(refined),
    newest: results(newest),
    exchanges: exchanges.map(({ url, body, answer }) => ({
      url,
      searches: body.trim().split('\n').filter((_, line) => line % 2 === 1).map((line) => JSON.parse(line)),
      esrr: answer.responses.map((response) => response.esrr ?? response.error)
    }))
  }
}

const scenarios = {
  search: () => search(args[0], args[1], args[2]),
  scroll: () => scroll(args[0], args[1], args[2]),
  searchkit: () => searchkit(args[0], args[1])
}
if (!(scenario in scenarios)) throw new Error(`unknown scenario ${scenario}; one of ${Object.keys(scenarios)}`)
console.log(JSON.stringify(await scenarios[scenario]()))
