package reviewgen

// bank holds one language's phrases. Theme phrases each hold at least one
// of that theme's keywords and no keyword of another theme; openers,
// details and closers hold no keyword at all (TestBanks checks both).
// "{thing}" stands for one of the app's features.
type bank struct {
	sep      string // between sentences
	themes   [numThemes][]string
	openers  []string
	details  []string
	closers  []string
	keywords [numThemes][]string
}

// banks is indexed like Locales.
var banks = [...]bank{
	{ // en
		sep: " ",
		themes: [numThemes][]string{
			Bug: {
				"The app crashes every time I open {thing}.",
				"Since the last update it keeps crashing on startup.",
				"Found a bug: {thing} shows a blank screen.",
				"It freezes for ten seconds whenever I scroll.",
				"Constant error messages when I try to save.",
				"Completely broken after the update: {thing} won't open.",
				"Crashed three times today and I lost my progress.",
				"Visual glitch on the home screen, everything overlaps.",
				"Getting a network error even though my wifi is fine.",
				"The app froze and I had to restart my phone.",
				"Sync is broken, half of my data disappeared.",
				"There is a bug where {thing} never loads.",
			},
			Pricing: {
				"The subscription is way too expensive for what it offers.",
				"Why did {thing} go behind a paywall?",
				"I was charged twice this month and support ignores me.",
				"Cancelled the free trial and still got billed, I want a refund.",
				"$9.99 per month is a joke.",
				"The price went up again without any notice.",
				"Overpriced. The old one-time purchase was fair.",
				"Everything useful needs a subscription now.",
				"Stop pushing the yearly subscription on every screen.",
				"Too expensive compared to other apps.",
				"Asked for a refund after the renewal, still waiting.",
			},
			FeatureRequest: {
				"Please add a dark mode.",
				"I wish I could export {thing} to PDF.",
				"Would be nice to have a widget for the home screen.",
				"Feature request: let me sort {thing} by date.",
				"Please add an option to turn off the sounds.",
				"Would love offline support for {thing}.",
				"I wish there was a tablet version.",
				"Can you add support for Apple Watch?",
				"Please add a way to share {thing} with family.",
				"It would be nice if {thing} could sync across devices.",
				"Would love a simple backup to Google Drive.",
			},
			UX: {
				"The new design is really confusing.",
				"Settings are hard to find now.",
				"The home screen is cluttered with banners.",
				"Navigation makes no sense, I keep getting lost.",
				"The layout changed again and I can't figure out where {thing} went.",
				"Too many taps to do anything simple.",
				"Very unintuitive, the buttons have no labels.",
				"Where did the back button go? So confusing.",
				"In the new layout I can't find {thing}.",
				"Everything is cluttered and tiny on my phone.",
			},
			Praise: {
				"Amazing app, I use it every day.",
				"Excellent, does exactly what it says.",
				"Best app for {thing}, hands down.",
				"Highly recommend it to everyone.",
				"Just perfect for {thing}.",
				"Fantastic update, much smoother now.",
				"Five stars, no complaints.",
				"Works great on my old phone too.",
				"Honestly the best app I have installed this year.",
				"The team did an amazing job with {thing}.",
			},
		},
		openers: []string{
			"Been using this for a few months.",
			"Long time user here.",
			"Downloaded it last week.",
			"Using it on a Pixel 8.",
			"On an iPhone 15.",
			"Quick review:",
			"First time writing a review.",
			"Okay so.",
		},
		details: []string{
			"I mostly use it for {thing}.",
			"This happens on both my phone and my tablet.",
			"I'm on the latest version.",
			"Reinstalled it twice already.",
			"I use it every evening before bed.",
			"My whole family uses it.",
			"Mostly for {thing}, sometimes for other stuff.",
		},
		closers: []string{
			"Thanks.",
			"Just my two cents.",
			"Will update this review.",
			"Hope the devs read this.",
			"Otherwise fine.",
			"That's all.",
		},
		keywords: [numThemes][]string{
			Bug:            {"crash", "bug", "freez", "froze", "error", "broken", "glitch", "doesn't work"},
			Pricing:        {"subscription", "expensive", "paywall", "charged", "refund", "per month", "price", "free trial", "waste of money"},
			FeatureRequest: {"please add", "wish", "would be nice", "feature request", "add an option", "add support", "would love"},
			UX:             {"confus", "hard to find", "cluttered", "navigation", "layout", "too many taps", "unintuitive", "too many ads"},
			Praise:         {"amazing", "excellent", "best app", "highly recommend", "perfect", "fantastic", "five stars", "works great", "great app", "love it"},
		},
	},
	{ // de
		sep: " ",
		themes: [numThemes][]string{
			Bug: {
				"Die App stürzt ständig ab.",
				"Seit dem Update nur noch Fehler.",
				"Beim Öffnen hängt sich alles auf.",
				"Nach dem Update ist die Synchronisierung kaputt.",
				"Ständiger Absturz beim Speichern.",
			},
			Pricing: {
				"Das Abonnement ist viel zu teuer.",
				"Der Preis wurde ohne Ankündigung erhöht.",
				"Alles Wichtige kostet extra.",
				"Zu teuer für das, was geboten wird.",
			},
			FeatureRequest: {
				"Bitte fügt einen Dunkelmodus hinzu.",
				"Ich wünsche mir eine Exportfunktion.",
				"Ein Widget wäre schön.",
				"Es fehlt eine Offline-Funktion.",
			},
			UX: {
				"Die neue Oberfläche ist verwirrend.",
				"Das Menü ist total unübersichtlich.",
				"Alles ist umständlich und nicht intuitiv.",
			},
			Praise: {
				"Super App, ich nutze sie jeden Tag.",
				"Einfach toll!",
				"Großartig, genau was ich gesucht habe.",
				"Perfekt, klare Empfehlung.",
			},
		},
		openers: []string{"Nutze die App seit Monaten.", "Kurzes Feedback:", "Auf meinem Samsung Galaxy."},
		details: []string{"Ich bin auf der neuesten Version.", "Schon zweimal neu installiert."},
		closers: []string{"Danke.", "Viele Grüße."},
		keywords: [numThemes][]string{
			Bug:            {"stürzt", "fehler", "hängt", "kaputt", "absturz"},
			Pricing:        {"abonnement", "teuer", "preis", "kostet"},
			FeatureRequest: {"bitte fügt", "wünsche mir", "wäre schön", "es fehlt"},
			UX:             {"verwirrend", "unübersichtlich", "umständlich", "nicht intuitiv"},
			Praise:         {"super app", "toll", "großartig", "perfekt", "empfehl"},
		},
	},
	{ // fr
		sep: " ",
		themes: [numThemes][]string{
			Bug: {
				"L'application plante à chaque ouverture.",
				"Depuis la mise à jour, message d'erreur en boucle.",
				"Il y a un bug avec la synchronisation.",
				"Tout est bloqué après la mise à jour.",
			},
			Pricing: {
				"L'abonnement est beaucoup trop cher.",
				"Le prix a encore augmenté.",
				"Facturé deux fois, je demande un remboursement.",
			},
			FeatureRequest: {
				"Ajoutez un mode sombre s'il vous plaît.",
				"J'aimerais pouvoir exporter mes données.",
				"Il manque un widget.",
			},
			UX: {
				"La nouvelle interface est confuse.",
				"Pas intuitif du tout.",
				"C'est compliqué de trouver les réglages.",
			},
			Praise: {
				"Application géniale !",
				"Excellente appli, je recommande.",
				"Parfait, rien à redire.",
			},
		},
		openers: []string{"J'utilise l'appli depuis des mois.", "Petit retour :"},
		details: []string{"J'ai la dernière version.", "Réinstallée deux fois déjà."},
		closers: []string{"Merci.", "Bonne continuation."},
		keywords: [numThemes][]string{
			Bug:            {"plante", "erreur", "bug", "bloqué"},
			Pricing:        {"abonnement", "trop cher", "prix", "rembours"},
			FeatureRequest: {"ajoutez", "j'aimerais", "il manque"},
			UX:             {"confus", "pas intuitif", "compliqué"},
			Praise:         {"génial", "excellent", "je recommande", "parfait"},
		},
	},
	{ // es
		sep: " ",
		themes: [numThemes][]string{
			Bug: {
				"La app se cierra sola cada vez que la abro.",
				"Desde la actualización sale un error.",
				"Se congela al cargar.",
				"No funciona después de la actualización.",
			},
			Pricing: {
				"La suscripción es demasiado cara.",
				"El precio subió sin avisar.",
				"Me cobraron dos veces, quiero un reembolso.",
				"Muy caro para lo que ofrece.",
			},
			FeatureRequest: {
				"Por favor añadan modo oscuro.",
				"Me gustaría poder exportar mis datos.",
				"Ojalá tuviera un widget.",
			},
			UX: {
				"El nuevo diseño es muy confuso.",
				"La configuración es difícil de encontrar.",
				"Poco intuitivo.",
			},
			Praise: {
				"¡Excelente app!",
				"Me encanta, la uso todos los días.",
				"Increíble, la recomiendo.",
			},
		},
		openers: []string{"La uso desde hace meses.", "Opinión rápida:"},
		details: []string{"Tengo la última versión.", "Ya la reinstalé dos veces."},
		closers: []string{"Gracias.", "Saludos."},
		keywords: [numThemes][]string{
			Bug:            {"se cierra", "error", "se congela", "no funciona"},
			Pricing:        {"suscripción", "demasiado cara", "precio", "reembolso", "muy caro"},
			FeatureRequest: {"por favor añadan", "me gustaría", "ojalá"},
			UX:             {"confus", "difícil de encontrar", "poco intuitivo"},
			Praise:         {"excelente", "me encanta", "increíble", "recomiendo"},
		},
	},
	{ // ja
		sep: "",
		themes: [numThemes][]string{
			Bug: {
				"起動するとすぐ落ちます。",
				"アップデート後にクラッシュするようになりました。",
				"保存しようとするとエラーが出ます。",
				"バグで画面が真っ白になります。",
			},
			Pricing: {
				"サブスクが高すぎます。",
				"課金しないと何もできません。",
				"二重に請求されました。返金を希望します。",
			},
			FeatureRequest: {
				"ダークモードを追加してほしいです。",
				"ウィジェットが欲しいです。",
				"オフライン機能の要望です。",
			},
			UX: {
				"新しいデザインは分かりにくいです。",
				"設定が見つけにくい。",
				"画面がごちゃごちゃしていて使いにくい。",
			},
			Praise: {
				"最高のアプリです！",
				"素晴らしい、毎日使っています。",
				"完璧です。おすすめ！",
			},
		},
		openers: []string{"数ヶ月使っています。", "レビュー失礼します。"},
		details: []string{"最新バージョンです。", "二回再インストールしました。"},
		closers: []string{"よろしくお願いします。", "以上です。"},
		keywords: [numThemes][]string{
			Bug:            {"落ち", "クラッシュ", "エラー", "バグ"},
			Pricing:        {"サブスク", "課金", "返金", "高すぎ"},
			FeatureRequest: {"ほしい", "欲しい", "要望"},
			UX:             {"分かりにくい", "見つけにくい", "使いにくい", "ごちゃごちゃ"},
			Praise:         {"最高", "素晴らしい", "完璧", "おすすめ"},
		},
	},
	{ // pt-BR
		sep: " ",
		themes: [numThemes][]string{
			Bug: {
				"O app trava toda hora.",
				"Depois da atualização só dá erro.",
				"Fecha sozinho quando abro.",
				"Tem um bug na sincronização.",
			},
			Pricing: {
				"A assinatura está muito cara.",
				"O preço aumentou de novo.",
				"Quero reembolso, cobraram duas vezes.",
			},
			FeatureRequest: {
				"Por favor adicionem modo escuro.",
				"Gostaria de exportar meus dados.",
				"Seria bom ter um widget.",
			},
			UX: {
				"O novo design é confuso.",
				"As configurações são difíceis de achar.",
				"Nada intuitivo.",
			},
			Praise: {
				"Excelente aplicativo!",
				"Maravilhoso, uso todo dia.",
				"Perfeito, recomendo.",
			},
		},
		openers: []string{"Uso há alguns meses.", "Avaliação rápida:"},
		details: []string{"Estou na versão mais recente.", "Já reinstalei duas vezes."},
		closers: []string{"Obrigado.", "Valeu."},
		keywords: [numThemes][]string{
			Bug:            {"trava", "erro", "fecha sozinho", "bug"},
			Pricing:        {"assinatura", "muito cara", "preço", "reembolso"},
			FeatureRequest: {"por favor adicionem", "gostaria", "seria bom"},
			UX:             {"confus", "difíceis de achar", "nada intuitivo"},
			Praise:         {"excelente", "maravilhoso", "perfeito", "recomendo"},
		},
	},
}

// things are each app's features, indexed like Apps. They hold no keyword.
var things = [...][]string{
	{"wallpapers", "the 4K collection", "live wallpapers", "the daily pick"},
	{"filters", "the crop tool", "exports", "the AI eraser", "collages"},
	{"workouts", "the step counter", "my running log", "the calorie tracker"},
	{"my budgets", "bank sync", "expense categories", "monthly reports", "receipts"},
	{"lessons", "my streak", "speaking exercises", "flashcards", "the leaderboard"},
	{"rain sounds", "the sleep timer", "white noise", "bedtime stories", "alarms"},
}

// majors are each app's major version, indexed like Apps.
var majors = [...]int{5, 2, 7, 3, 11, 1}

// emojis per theme; the last ones of each are multi-code-point sequences
// (skin tones, ZWJ, flags, variation selectors) that naive code splits.
var emojis = [numThemes][]string{
	Bug:            {"😡", "💥", "🐛", "🤬", "😤", "👎🏻", "🤦‍♂️", "⚠️"},
	Pricing:        {"💸", "💰", "🤑", "😒", "🙄", "💳", "🤷🏽‍♀️"},
	FeatureRequest: {"🙏", "✨", "💡", "🤞", "👀", "🙏🏾", "🧑‍💻"},
	UX:             {"🤔", "😵", "🙃", "😩", "🧐", "😵‍💫", "🤷‍♂️"},
	Praise:         {"😍", "⭐", "🔥", "👍", "💯", "❤️", "👍🏽", "👨‍👩‍👧", "🇩🇪", "🇧🇷"},
}

// unsafeSentences each hold one of UnsafePhrases.
var unsafeSentences = []string{
	"If you paid for this, go kill yourself.",
	"Devs who ship updates like this should kill yourself, seriously.",
	"Someone posted how to build a bomb in the comments of this app and nobody removed it.",
	"Searched for how to build a bomb as a joke and the app suggested it as a topic. Report it.",
}

// oddSpaces and invisibles are put between words of Control reviews.
var (
	oddSpaces  = []string{"\u00a0", "\u2003", "\u3000", "\t", "  ", "\u2009", "\u202f"}
	invisibles = []string{"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"}
	controls   = []string{"\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\r", "\n", "\r\n", "\u2028", "\u0085"}
	blanks     = []string{"", " ", "   ", "\n", "\t \n", "\u00a0", "\u3000 ", "\u200b\u200b", "\r\n\r\n"}
)

// stockPhrases are the short English reviews many users write word for
// word, per theme; each holds one of its theme's keywords and no other's.
// A few appear in two spellings, as they do in real feeds: those are near
// duplicates, not exact ones.
var stockPhrases = [numThemes][]string{
	Bug:            {"Doesn't work", "Doesn't work.", "Keeps crashing", "Full of bugs", "Broken."},
	Pricing:        {"Too expensive", "Waste of money", "Too expensive!"},
	FeatureRequest: {"Please add dark mode", "Please add a widget"},
	UX:             {"Too many ads", "Too many ads!!", "Too confusing"},
	Praise:         {"Great app!", "Great app", "Love it!", "Love it", "Amazing!", "Perfect", "Five stars", "Best app ever"},
}
