package esrr.engines;

import java.util.Map;
import java.util.regex.Pattern;

import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.Tokenizer;
import org.apache.lucene.analysis.pattern.PatternReplaceFilter;
import org.apache.lucene.analysis.pattern.PatternTokenizer;
import org.elasticsearch.common.regex.Regex;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.index.IndexSettings;
import org.elasticsearch.index.analysis.AbstractTokenFilterFactory;
import org.elasticsearch.index.analysis.AbstractTokenizerFactory;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/**
 * The {@code pattern} tokenizer and {@code pattern_replace} token filter of Elasticsearch 7's
 * {@code analysis-common} module, which esrr's index analyser uses.
 *
 * <p>Elasticsearch publishes its server jar and {@code transport-netty4-client} on Maven Central, but not
 * {@code analysis-common}, so the launcher registers these two from the same Lucene classes the module wraps
 * ({@code PatternTokenizer}, {@code PatternReplaceFilter}) with the module's parameters and defaults
 * ({@code pattern} {@code \W+}, {@code flags}, {@code group} -1; {@code pattern} required, {@code replacement}
 * "", {@code all} true). OpenSearch publishes its {@code analysis-common}, which the launcher loads instead.
 */
public final class PatternAnalysisPlugin extends Plugin implements AnalysisPlugin {

    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        return Map.of("pattern", PatternTokenizerFactory::new);
    }

    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        return Map.of("pattern_replace", AnalysisPlugin.requiresAnalysisSettings(PatternReplaceFilterFactory::new));
    }

    static final class PatternTokenizerFactory extends AbstractTokenizerFactory {
        private final Pattern pattern;
        private final int group;

        PatternTokenizerFactory(IndexSettings indexSettings, Environment environment, String name, Settings settings) {
            super(indexSettings, settings, name);
            this.pattern = Regex.compile(settings.get("pattern", "\\W+"), settings.get("flags"));
            this.group = settings.getAsInt("group", -1);
        }

        @Override
        public Tokenizer create() {
            return new PatternTokenizer(pattern, group);
        }
    }

    static final class PatternReplaceFilterFactory extends AbstractTokenFilterFactory {
        private final Pattern pattern;
        private final String replacement;
        private final boolean all;

        PatternReplaceFilterFactory(IndexSettings indexSettings, Environment environment, String name,
                                    Settings settings) {
            super(indexSettings, name, settings);
            String source = settings.get("pattern", null);
            if (source == null) {
                throw new IllegalArgumentException("pattern is missing for [" + name
                        + "] token filter of type 'pattern_replace'");
            }
            this.pattern = Regex.compile(source, settings.get("flags"));
            this.replacement = settings.get("replacement", "");
            this.all = settings.getAsBoolean("all", true);
        }

        @Override
        public TokenStream create(TokenStream tokenStream) {
            return new PatternReplaceFilter(tokenStream, pattern, replacement, all);
        }
    }
}
